#!/usr/bin/env bash
# Benchmark (not a test): peak RSS of `ferry prepare` on one shard of about 0.2, 1
# and 2 GB of uncompressed JSON lines, on one worker thread and on every core, to
# show that memory does not grow with shard size: each run should stay within
# 100 MiB + 64 MiB per worker thread. Uses the real-text corpus of
# scripts/bench-prepare.sh when present, else the demo's synthetic corpus (said so
# in the output); repeats it into one .jsonl.zst per size.
#
# Two things rise with a run's length up to bounds of their own, then stay: each
# worker's cache of pieces fills as new pieces come, up to two generations
# (src/tokenizer/bpe.rs); and a longer run more often meets the moment when every
# batch its budget allows in flight is held at once (src/prepare/budget.rs).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work=${BENCH_DIR:-$root/target/bench-rss}
mkdir -p "$work/big"
cargo build --release --quiet
ferry="$root/target/release/ferry"
source_dir="$root/target/bench-prepare/corpus"
kind="real text (scripts/bench-prepare.sh corpus)"
if [ ! -s "$source_dir/train-00.jsonl.zst" ]; then
  kind="SYNTHETIC text (the demo corpus; run scripts/bench-prepare.sh first for real text)"
  "$ferry" -q demo --dir "$work/demo" >/dev/null
  source_dir="$work/demo/corpus"
fi
corpus_bytes=$(for f in "$source_dir"/*.jsonl.zst; do zstd -dc "$f"; done | wc -c)
cores=$(nproc)
sizes=""
# Copies of the corpus for each size: at least 1, then about 1 GB and 2 GB.
for target in 0 1000000000 2000000000; do
  copies=$(( (target + corpus_bytes - 1) / corpus_bytes ))
  [ "$copies" -ge 1 ] || copies=1
  # A corpus of over 1 GB makes two sizes one shard: it is run once.
  case " $sizes " in *" $copies "*) continue ;; esac
  shard="$work/big/copies-$copies.jsonl.zst"
  if [ ! -s "$shard" ]; then
    echo "==> writing one shard of $copies copies of the corpus ($kind)" >&2
    for _ in $(seq "$copies"); do
      for f in "$source_dir"/*.jsonl.zst; do zstd -dc "$f"; done
    done | zstd -q -1 -T0 -o "$shard.partial"
    mv "$shard.partial" "$shard"
  fi
  sizes="$sizes $copies"
done
python3 - "$ferry" "$work" "$corpus_bytes" "$cores" "$kind" $sizes <<'PY'
import json, os, shutil, subprocess, sys
ferry, work, corpus_bytes, cores, kind = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
copies = [int(c) for c in sys.argv[6:]]
print(f"one shard per run, {kind}; {cores} cores")
print(f"{'shard (uncompressed)':>21} {'threads':>7} {'tokens':>9} {'seconds':>8} {'peak RSS':>9} {'bound':>9}")
for n in copies:
    with open(f"{work}/spec-{n}.toml", "w") as f:
        f.write(f'name = "bench-rss-{n}"\n[splits]\ntrain = ["big/copies-{n}.jsonl.zst"]\n[tokenizer]\nbuiltin = "gpt2"\n')
peaks = {}
for threads in sorted({1, cores}):
    for n in copies:
        spec = f"{work}/spec-{n}.toml"
        shutil.rmtree(f"{work}/cache", ignore_errors=True)
        # Untimed: the write-back of the run before (up to 1.6 GB) is not charged to this one.
        os.sync()
        child = subprocess.Popen([ferry, "-q", "prepare", spec, "--cache", f"{work}/cache", "--jobs", str(threads), "--json"],
                                 stdout=subprocess.PIPE, text=True)
        out = child.stdout.read()
        _, status, usage = os.wait4(child.pid, 0)
        if status != 0:
            sys.exit(f"ferry prepare failed on {n} copies (status {status})")
        result = json.loads(out)
        peak = usage.ru_maxrss / 1024
        bound = 100 + 64 * threads
        peaks.setdefault(threads, []).append(peak)
        seconds = result["seconds"]
        print(f"{n * corpus_bytes / 1e9:18.2f} GB {threads:7d} {result['totals']['tokens'] / 1e6:8.0f}M "
              f"{seconds:8.1f} {peak:6.0f} MiB {bound:5d} MiB {'OK' if peak <= bound else 'MISSED'}")
for threads, runs in peaks.items():
    print(f"{threads} thread(s): peak RSS {runs[0]:.0f} -> {runs[-1]:.0f} MiB from the smallest shard to the largest "
          f"({runs[-1] - runs[0]:+.0f} MiB for {copies[-1] / copies[0]:.0f}x the text)")
largest = max(max(runs) for runs in peaks.values())
print(f"largest peak RSS {largest:.0f} MiB (target <= 1024 MiB) {'OK' if largest <= 1024 else 'MISSED'}")
PY
rm -rf "$work/cache"
