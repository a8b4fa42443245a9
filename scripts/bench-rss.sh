#!/usr/bin/env bash
# Benchmark (not a test): peak RSS of `ferry prepare` on a single shard of at least
# 2 GB of uncompressed JSON lines, to show memory does not grow with shard size.
# Uses the real-text corpus of scripts/bench-prepare.sh when present, else the
# demo's synthetic corpus (said so in the output); repeats it into one .jsonl.zst.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work=${BENCH_DIR:-$root/target/bench-rss}
mkdir -p "$work"
cargo build --release --quiet
ferry="$root/target/release/ferry"
source_dir="$root/target/bench-prepare/corpus"
kind="real text (scripts/bench-prepare.sh corpus)"
if [ ! -s "$source_dir/train-00.jsonl.zst" ]; then
  kind="SYNTHETIC text (the demo corpus; run scripts/bench-prepare.sh first for real text)"
  "$ferry" -q demo --dir "$work/demo" >/dev/null
  source_dir="$work/demo/corpus"
fi
shard="$work/big/one-shard.jsonl.zst"
if [ ! -s "$shard" ]; then
  mkdir -p "$work/big"
  echo "==> writing one shard of >= 2 GB uncompressed ($kind)" >&2
  (
    bytes=0
    while [ "$bytes" -lt 2000000000 ]; do
      for f in "$source_dir"/*.jsonl.zst; do zstd -dc "$f"; done
      bytes=$((bytes + $(for f in "$source_dir"/*.jsonl.zst; do zstd -dc "$f"; done | wc -c)))
    done
  ) | zstd -q -1 -T0 -o "$shard"
fi
uncompressed=$(zstd -dc "$shard" | wc -c)
cat > "$work/spec.toml" <<TOML
name = "bench-rss"
[splits]
train = ["big/one-shard.jsonl.zst"]
[tokenizer]
builtin = "gpt2"
TOML
rm -rf "$work/cache"
python3 - "$ferry" "$work" "$uncompressed" "$kind" <<'PY'
import json, resource, subprocess, sys, time
ferry, work, uncompressed, kind = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
started = time.time()
out = subprocess.run([ferry, "-q", "prepare", f"{work}/spec.toml", "--cache", f"{work}/cache", "--json"],
                     check=True, capture_output=True, text=True).stdout
seconds = time.time() - started
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
result = json.loads(out)
print(f"one shard: {uncompressed / 1e9:.2f} GB uncompressed, {kind}")
print(f"ferry prepare: {result['totals']['tokens'] / 1e6:.0f} M tokens in {seconds:.0f} s; peak RSS {peak / 2**20:.0f} MiB "
      f"(target <= 1024 MiB) {'OK' if peak <= 2**30 else 'MISSED'}")
PY
