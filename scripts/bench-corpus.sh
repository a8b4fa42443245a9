#!/usr/bin/env bash
# The benchmarks' corpus: about MB megabytes of real text (kernel sources and
# docs, Python and Perl docs, the GCIDE dictionary, from Debian packages fetched
# with apt-get download, no install; above 200 MB, the rest of the kernel's tree
# too) as 16 Pile-style shards DIR/train-NN.jsonl.zst, described by DIR.json.
# Without apt it falls back to ferry's synthetic corpus and DIR.json says
# {"synthetic": true}. Kept when DIR already holds the shards.
#
# Usage: bench-corpus.sh DIR MB PYTHON FERRY
# (PYTHON has zstandard; FERRY is a built ferry, for the fallback.)
set -euo pipefail
cd "$(dirname "$0")/.."
corpus=$1 target_mb=$2 python=$3 ferry=$4
say() { printf '==> %s\n' "$*" >&2; }

# DIR.json is written last, so a corpus with it and its first shard is whole.
[ -s "$corpus.json" ] && [ -s "$corpus/train-00.jsonl.zst" ] && exit 0
sources=${BENCH_SOURCES:-$(pwd)/target/bench-sources}
mkdir -p "$sources"
if (cd "$sources" && apt-get download -qq linux-source-6.1 python3.11-doc perl-doc dict-gcide >/dev/null 2>&1); then
  say "extracting packages"
  rm -rf "$sources/x"
  for deb in "$sources"/*.deb; do dpkg-deb -x "$deb" "$sources/x"; done
  tarball=$(ls "$sources"/x/usr/src/linux-source-*.tar.xz)
  kernel_parts=('*/Documentation/*' '*/kernel/*' '*/mm/*' '*/fs/*' '*/net/core/*' '*/lib/*' '*/include/linux/*')
  # These parts and the packages give about 210 MB of text. A larger corpus (a
  # steady-state run) takes the rest of the kernel's tree too; only then, so that
  # a smaller corpus stays the same text whatever was asked before.
  if [ "${target_mb%.*}" -gt 200 ]; then
    kernel_parts+=('*/drivers/*' '*/arch/*' '*/sound/*' '*/tools/*')
  fi
  tar -xJf "$tarball" -C "$sources/x" --wildcards "${kernel_parts[@]}"
  gunzip -rf "$sources/x/usr/share/dictd" 2>/dev/null || true
  say "assembling a ${target_mb} MB Pile-style corpus"
  "$python" scripts/bench_corpus.py "$corpus" "$target_mb" "$sources/x" > "$corpus.json"
else
  say "SYNTHETIC text (apt-get download failed; the numbers are not on real text)"
  synthetic=$(mktemp -d)
  "$ferry" demo --dir "$synthetic" >/dev/null
  rm -rf "$corpus"; mkdir -p "$corpus"
  for i in $(seq -w 0 15); do cp "$synthetic/corpus/train-0$((10#$i % 4)).jsonl.zst" "$corpus/train-$i.jsonl.zst"; done
  rm -rf "$synthetic"
  echo '{"synthetic": true}' > "$corpus.json"
fi
