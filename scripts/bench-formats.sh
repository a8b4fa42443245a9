#!/usr/bin/env bash
# Benchmark (not a test): what `formats = ["hf", "megatron", "flat"]` adds to
# `ferry prepare` over `"hf"` alone: wall and CPU time, the publish step that puts
# the per-split files together, and peak RSS, on one shard of BENCH_SMALL_MB and one
# four times larger (memory must not grow with shard size). The two runs alternate,
# so each round's pair sees the same machine; the verdict is the median of the
# rounds' ratios, which a shared host's drifting speed moves far less than a
# best-of. System time is shown apart: the extra formats write every token a second
# time (one array that Megatron and flat share), and copying those bytes into the
# page cache is kernel time, which on a virtual machine whose free memory goes back
# to the host costs several times what it costs on bare metal.
# Uses scripts/bench-prepare.sh's real-text corpus when present (BENCH_CORPUS names
# another), else the demo's synthetic corpus (said so in the output).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work=${BENCH_DIR:-$root/target/bench-formats}
small_mb=${BENCH_SMALL_MB:-160}
rounds=${BENCH_ROUNDS:-3}
mkdir -p "$work"
say() { printf '==> %s\n' "$*" >&2; }

# FERRY_BIN runs an already built binary instead of building the release one.
if [ -z "${FERRY_BIN:-}" ]; then
  cargo build --release --quiet
fi
ferry=${FERRY_BIN:-$root/target/release/ferry}
source_dir=${BENCH_CORPUS:-$root/target/bench-prepare/corpus}
kind="real text (scripts/bench-prepare.sh corpus)"
if [ ! -s "$source_dir/train-00.jsonl.zst" ]; then
  kind="SYNTHETIC text (the demo corpus; run scripts/bench-prepare.sh first for real text)"
  [ -d "$work/demo/corpus" ] || "$ferry" -q demo --dir "$work/demo" >/dev/null
  source_dir="$work/demo/corpus"
fi

# One shard of $1 MB of JSON lines (the last, cut line dropped), the source corpus repeated.
make_shard() {
  local mb=$1 shard="$work/shard-$1/one.jsonl.zst"
  if [ ! -s "$shard" ]; then
    mkdir -p "$(dirname "$shard")"
    say "writing one shard of $mb MB uncompressed ($kind)"
    # The endless reader stops quietly when head has read enough.
    { while :; do for f in "$source_dir"/*.jsonl.zst; do zstd -qdc "$f" 2>/dev/null || exit 0; done; done; } \
      | head -c $((mb * 1000000)) | sed '$d' | zstd -q -1 -T0 -o "$shard"
  fi
}

# Writes the spec for one shard size and format list.
write_spec() {
  local mb=$1 name=$2 formats=$3
  cat > "$work/$name-$mb.toml" <<TOML
name = "bench-formats-$name"
[splits]
train = ["shard-$mb/one.jsonl.zst"]
[tokenizer]
builtin = "gpt2"
[sequence]
seq_len = 1024
[output]
formats = $formats
TOML
}

# One measured run, in its own Python process so its peak RSS is its own. The
# page cache is flushed first, untimed: the write-back of the run before (up to
# gigabytes with every format) would otherwise be charged to this one.
measure() {
  local spec=$1
  rm -rf "$work/cache"
  sync
  python3 - "$ferry" "$spec" "$work/cache" <<'PY'
import json, resource, subprocess, sys, time
ferry, spec, cache = sys.argv[1:4]
started = time.time()
out = subprocess.run([ferry, "-q", "prepare", spec, "--cache", cache, "--json"], check=True, capture_output=True, text=True).stdout
wall = time.time() - started
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
manifest = json.load(open(json.loads(out)["entry"] + "/manifest.json"))
print(json.dumps({"wall": wall, "cpu": usage.ru_utime + usage.ru_stime, "sys": usage.ru_stime, "rss": usage.ru_maxrss * 1024,
                  "publish": manifest["timings"]["publish_seconds"], "tokens": manifest["totals"]["tokens"],
                  "bytes": manifest["totals"]["bytes"]}))
PY
}

: > "$work/runs.jsonl"
for mb in "$small_mb" $((small_mb * 4)); do
  make_shard "$mb"
  write_spec "$mb" hf '["hf"]'
  write_spec "$mb" all '["hf", "megatron", "flat"]'
  for round in $(seq 1 "$rounds"); do
    for name in hf all; do
      say "shard $mb MB, round $round/$rounds: formats $name"
      printf '{"mb": %s, "round": %s, "formats": "%s", "run": %s}\n' "$mb" "$round" "$name" "$(measure "$work/$name-$mb.toml")" >> "$work/runs.jsonl"
    done
  done
done
rm -rf "$work/cache"

python3 - "$work/runs.jsonl" "$kind" "$(nproc)" <<'PY'
import json, statistics, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
print(f"corpus: {sys.argv[2]}; {sys.argv[3]} cores; {sum(1 for r in runs if r['mb'] == runs[0]['mb'] and r['formats'] == 'hf')} rounds of hf then all; "
      "lines per format: the fastest run; verdict: the median of the rounds' all/hf ratios")
rss = {}
for mb in sorted({r["mb"] for r in runs}):
    best = {name: min((r["run"] for r in runs if r["mb"] == mb and r["formats"] == name), key=lambda x: x["wall"]) for name in ("hf", "all")}
    hf, extra = best["hf"], best["all"]
    for name, run in best.items():
        print(f"shard {mb:4d} MB  {name:3s}  {run['tokens'] / 1e6:6.1f} M tokens  {run['wall']:6.1f} s wall  {run['cpu']:6.1f} s CPU ({run['sys']:4.1f} s system)  publish {run['publish']:5.2f} s  peak RSS {run['rss'] / 2**20:5.0f} MiB  entry {run['bytes'] / 2**20:6.0f} MiB")
    pairs = {}
    for r in runs:
        if r["mb"] == mb:
            pairs.setdefault(r["round"], {})[r["formats"]] = r["run"]
    ratios = {key: sorted(p["all"][key] / p["hf"][key] - 1 for p in pairs.values()) for key in ("wall", "cpu")}
    wall, cpu = statistics.median(ratios["wall"]), statistics.median(ratios["cpu"])
    rss[mb] = extra["rss"] - hf["rss"]
    spread = ", ".join(f"{x * 100:+.1f}%" for x in ratios["wall"])
    print(f"shard {mb:4d} MB  all formats add {wall * 100:+5.1f}% wall, {cpu * 100:+5.1f}% CPU (median of rounds; wall by round: {spread}) "
          f"(target < 10%) {'OK' if wall < 0.10 else 'MISSED'}; peak RSS {rss[mb] / 2**20:+.0f} MiB over hf")
small, big = sorted(rss)
all_rss = {mb: min(r["run"]["rss"] for r in runs if r["mb"] == mb and r["formats"] == "all") for mb in (small, big)}
growth = (all_rss[big] - all_rss[small]) / 2**20
growth_share = growth * 2**20 / all_rss[small]
print(f"peak RSS with all formats: {all_rss[small] / 2**20:.0f} MiB at {small} MB, {all_rss[big] / 2**20:.0f} MiB at {big} MB "
      f"({growth:+.0f} MiB, {growth_share * 100:+.0f}%, for a 4x larger shard; target: no growth, within 10%) {'OK' if growth_share < 0.10 else 'MISSED'}")
PY
