#!/usr/bin/env bash
# Benchmark (not a test): new mixtures of two token stores against building the
# components, and against what a `datasets` user does for a new mixture. On
# scripts/bench-prepare.sh's real-text corpus (its shards split in two halves of
# ~100 MB each) with the builtin GPT-2, each round, from an empty cache:
#   1. the components' fresh builds: `ferry prepare` of each half's spec at
#      seq_len 2048 (tokenize into its token store, then its view);
#   2. three new mixtures of the two, one after another: 0.7/0.3 at 2048 (seed 1),
#      0.5/0.5 at 2048 (seed 2), 0.3/0.7 at 4096 with megatron and flat formats;
#   3. `datasets`' way to the first mixture: `interleave_datasets` of the two
#      component views (already tokenized and grouped) by the same probabilities,
#      then `save_to_disk`, then `sync` (ferry's files are durable when it returns),
#      when Python with `datasets` is there;
#   4. `cp -r` of the first mixture's folder, then `sync`: its bytes written and made
#      durable, the floor of any mixture that writes its rows.
# Each command's page-cache writeback is flushed (`sync`, untimed) before it starts.
# Prints, best of BENCH_ROUNDS rounds: each build's time, the components' builds /
# first mixture ratio (target >= 5x), the mixture against datasets and against cp.
#
#   BENCH_ROUNDS (default 3)  BENCH_DIR  BENCH_CORPUS  BENCH_PYTHON  FERRY_BIN
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work=${BENCH_DIR:-$root/target/bench-mixtures}
rounds=${BENCH_ROUNDS:-3}
python=${BENCH_PYTHON:-$root/target/test-venv/bin/python}
[ -x "$python" ] || python=python3
mkdir -p "$work"
say() { printf '==> %s\n' "$*" >&2; }

if [ -z "${FERRY_BIN:-}" ]; then
  cargo build --release --quiet
fi
ferry=${FERRY_BIN:-$root/target/release/ferry}
corpus=${BENCH_CORPUS:-$root/target/bench-prepare/corpus}
kind="real text (scripts/bench-prepare.sh corpus)"
if [ ! -s "$corpus/train-00.jsonl.zst" ]; then
  kind="SYNTHETIC text (the demo corpus; run scripts/bench-prepare.sh first for real text)"
  [ -d "$work/demo/corpus" ] || "$ferry" -q demo --dir "$work/demo" >/dev/null
  corpus="$work/demo/corpus"
fi
mapfile -t shards < <(ls "$corpus"/*.jsonl.zst | sort)
half=$(( ${#shards[@]} / 2 ))
[ "$half" -ge 1 ] || { say "the corpus needs at least two shards"; exit 1; }

# component NAME FILES...: a spec of those files at seq_len 2048.
component() {
  local name=$1
  shift
  local list
  list=$(printf '"%s", ' "$@")
  printf 'name = "bench-mix-%s"\n[splits]\ntrain = [%s]\n[tokenizer]\nbuiltin = "gpt2"\n[sequence]\nseq_len = 2048\n' \
    "$name" "${list%, }" > "$work/$name.toml"
}
component first "${shards[@]:0:$half}"
component second "${shards[@]:$half}"

# mixture NAME SEED W1 W2 SEQ_LEN [OUTPUT-LINES]
mixture() {
  printf 'name = "bench-mix-%s"\n[mix]\nseed = %s\n[[mix.components]]\nspec = "first.toml"\nweight = %s\n' "$1" "$2" "$3" > "$work/$1.toml"
  printf '[[mix.components]]\nspec = "second.toml"\nweight = %s\n[sequence]\nseq_len = %s\n[output]\n%b' "$4" "$5" "${6:-}" >> "$work/$1.toml"
}
mixture mix_70_30 1 0.7 0.3 2048
mixture mix_50_50 2 0.5 0.5 2048
mixture mix_30_70_4096 3 0.3 0.7 4096 'formats = ["hf", "megatron", "flat"]\n'
mixtures="mix_70_30 mix_50_50 mix_30_70_4096"

# run NAME: times `ferry prepare` of spec NAME into the round's cache; one JSON line.
run() {
  sync
  "$python" - "$ferry" "$work/$1.toml" "$work/cache" "$1" <<'PY'
import json, subprocess, sys, time
ferry, spec, cache, name = sys.argv[1:]
started = time.perf_counter()
out = subprocess.run([ferry, "-q", "prepare", spec, "--cache", cache, "--json"], check=True, capture_output=True, text=True).stdout
seconds = time.perf_counter() - started
result = json.loads(out)
manifest = json.load(open(f"{result['entry']}/manifest.json"))
stores = result.get("token_stores") or [result["token_store"]]
print(json.dumps({"name": name, "seconds": seconds, "entry": result["entry"], "bytes": manifest["totals"]["bytes"],
                  "tokens": manifest["totals"]["tokens"], "tokenized": any(s["tokenized"] for s in stores),
                  "mixture": manifest.get("mixture")}))
PY
}

# datasets' new mixture: the component views interleaved by the first mixture's weights.
interleave() {
  sync
  "$python" - "$1" "$2" "$work/hf-mix" <<'PY'
import json, shutil, sys, time
first, second, target = sys.argv[1:]
try:
    from datasets import interleave_datasets, load_from_disk
except ImportError:
    print(json.dumps({"name": "datasets", "skipped": "no datasets in this Python"}))
    sys.exit(0)
shutil.rmtree(target, ignore_errors=True)
started = time.perf_counter()
parts = [load_from_disk(path)["train"] for path in (first, second)]
mixed = interleave_datasets(parts, probabilities=[0.7, 0.3], seed=1, stopping_strategy="first_exhausted")
mixed.save_to_disk(target)
saved = time.perf_counter() - started
# ferry's files are durable when it returns (each is fsynced): the same for datasets'.
import subprocess
subprocess.run(["sync", "-f", target], check=True)
print(json.dumps({"name": "datasets", "seconds": saved, "with_sync": time.perf_counter() - started, "rows": len(mixed)}))
PY
}

: > "$work/runs.jsonl"
for round in $(seq 1 "$rounds"); do
  say "round $round/$rounds: two components' fresh builds, then $mixtures, datasets, cp ($kind)"
  rm -rf "$work/cache" "$work/copy"
  run first >> "$work/runs.jsonl"
  run second >> "$work/runs.jsonl"
  for name in $mixtures; do
    run "$name" >> "$work/runs.jsonl"
  done
  entries=$(tail -n 5 "$work/runs.jsonl" | "$python" -c 'import json, sys
runs = {r["name"]: r["entry"] for r in map(json.loads, sys.stdin)}
print(runs["first"], runs["second"], runs["mix_70_30"])')
  read -r first second mixed <<< "$entries"
  interleave "$first" "$second" >> "$work/runs.jsonl"
  sync
  "$python" - "$mixed" "$work/copy" >> "$work/runs.jsonl" <<'PY'
import json, subprocess, sys, time
source, target = sys.argv[1:]
started = time.perf_counter()
subprocess.run(["cp", "-r", source, target], check=True)
copied = time.perf_counter() - started
subprocess.run(["sync", "-f", target], check=True)
print(json.dumps({"name": "cp", "seconds": copied, "with_sync": time.perf_counter() - started}))
PY
done

"$python" - "$work/runs.jsonl" "$kind" <<'PY'
import json, sys
runs = [json.loads(line) for line in open(sys.argv[1])]
best = {}
for run in runs:
    if "seconds" in run and (run["name"] not in best or run["seconds"] < best[run["name"]]["seconds"]):
        best[run["name"]] = run
rounds = sum(r["name"] == "first" for r in runs)
built = best["first"]["seconds"] + best["second"]["seconds"]
print(f"corpus: {sys.argv[2]}; best of {rounds} rounds")
for name in ["first", "second"]:
    r = best[name]
    print(f"component {name:7s} fresh build    {r['seconds']:6.2f} s  {r['tokens'] / 1e6:6.1f} M tokens")
for name in ["mix_70_30", "mix_50_50", "mix_30_70_4096"]:
    r = best[name]
    assert not r["tokenized"], f"{name} tokenized again"
    shares = ", ".join(f"{c['splits']['train']['realized_weight']:.4f}" for c in r["mixture"]["components"])
    print(f"mixture {name:16s}       {r['seconds']:6.2f} s  {r['tokens'] / 1e6:6.1f} M tokens, "
          f"{r['bytes'] / r['seconds'] / 1e9:5.2f} GB/s of its {r['bytes'] / 1e6:.0f} MB; realized {shares}; "
          f"{built / r['seconds']:5.1f}x faster than building its components")
mixed = best["mix_70_30"]
ratio = built / mixed["seconds"]
print(f"ratio components' builds / new mixture {ratio:6.2f}x  (target >= 5x)  {'OK' if ratio >= 5 else 'MISSED'}")
if "datasets" in best:
    hf = best["datasets"]
    hf_sync = min(r["with_sync"] for r in runs if r["name"] == "datasets")
    print(f"datasets interleave_datasets + save_to_disk {hf['seconds']:6.2f} s, {hf_sync:.2f} s with sync ({hf['rows']} rows): "
          f"ferry's mixture (durable) / datasets with sync {mixed['seconds'] / hf_sync:.2f}")
else:
    print("datasets: SKIPPED (no datasets in this Python)")
cp = best["cp"]
cp_sync = min(r["with_sync"] for r in runs if r["name"] == "cp")
print(f"cp -r of the mixture {cp['seconds']:.2f} s, {cp_sync:.2f} s with sync: mixture / (cp + sync) {mixed['seconds'] / cp_sync:.2f}")
PY
