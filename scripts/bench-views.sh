#!/usr/bin/env bash
# Benchmark (not a test): a new view of a token store against a fresh build, and
# against `cp` writing the same bytes. On scripts/bench-prepare.sh's real-text
# corpus (>= 200 MB) with the builtin GPT-2, each round, from an empty cache:
#   1. a fresh build: `ferry prepare` of a spec at seq_len 1024 (tokenize into the
#      token store, then derive the view);
#   2. new views of that token store, one after another: seq_len 2048 alone; with
#      labels; with formats = ["hf", "megatron"]; best_fit at 2048 and at 4096; the
#      fresh build's spec with the olmo format added;
#   3. `cp -r` of the seq_len 2048 view's folder to another folder of the same disk,
#      then `sync` of the copies: the same bytes written and made durable, as ferry's
#      files are (each is fsynced before it is renamed into place). cp alone is shown too.
# Each command's page-cache writeback is flushed (`sync`, untimed) before it starts.
# Prints, best of BENCH_ROUNDS rounds: each view's time and GB/s (of its token
# columns, and of all its bytes), the fresh build / seq_len view ratio (target >= 5x),
# view / (cp + sync) (target <= 2x), and best-fit's fill at 2048 and 4096 (target >= 99%).
#
#   BENCH_ROUNDS (default 3)  BENCH_DIR  BENCH_CORPUS  FERRY_BIN (an already built ferry)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work=${BENCH_DIR:-$root/target/bench-views}
rounds=${BENCH_ROUNDS:-3}
python=${BENCH_PYTHON:-python3}
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

# spec NAME SEQUENCE-LINES [OUTPUT-LINES]
spec() {
  printf 'name = "bench-views-%s"\n[splits]\ntrain = ["%s/*.jsonl.zst"]\n[tokenizer]\nbuiltin = "gpt2"\n[sequence]\n%b[output]\n%b' \
    "$1" "$corpus" "$2" "${3:-}" > "$work/$1.toml"
}
spec fresh 'seq_len = 1024\n'
spec seq_len 'seq_len = 2048\n'
spec labels 'seq_len = 2048\nlabels = true\n'
spec megatron 'seq_len = 2048\n' 'formats = ["hf", "megatron"]\n'
spec best_fit_2048 'seq_len = 2048\npack = "best_fit"\n'
spec best_fit_4096 'seq_len = 4096\npack = "best_fit"\n'
spec olmo 'seq_len = 1024\n' 'formats = ["hf", "olmo"]\n'
views="seq_len labels megatron best_fit_2048 best_fit_4096 olmo"

# run NAME: times `ferry prepare` of spec NAME into the round's cache; one JSON line.
run() {
  sync
  "$python" - "$ferry" "$work/$1.toml" "$work/cache" "$1" <<'PY'
import json, resource, subprocess, sys, time
ferry, spec, cache, name = sys.argv[1:]
started = time.perf_counter()
out = subprocess.run([ferry, "-q", "prepare", spec, "--cache", cache, "--json"], check=True, capture_output=True, text=True).stdout
seconds = time.perf_counter() - started
result = json.loads(out)
manifest = json.load(open(f"{result['entry']}/manifest.json"))
files = manifest["files"]
token_bytes = sum(f["size"] for f in files if f["path"].endswith(".arrow"))
print(json.dumps({"name": name, "seconds": seconds, "entry": result["entry"], "bytes": manifest["totals"]["bytes"],
                  "arrow_bytes": token_bytes, "tokens": manifest["totals"]["tokens"],
                  "tokenized": result["token_store"]["tokenized"], "packing": manifest["packing"],
                  "peak_rss_bytes": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024}))
PY
}

: > "$work/runs.jsonl"
for round in $(seq 1 "$rounds"); do
  say "round $round/$rounds: a fresh build, then $views, then cp of the seq_len view ($kind)"
  rm -rf "$work/cache" "$work/copy"
  run fresh >> "$work/runs.jsonl"
  for view in $views; do
    run "$view" >> "$work/runs.jsonl"
  done
  entry=$(tail -n +2 "$work/runs.jsonl" | "$python" -c 'import json, sys
for line in sys.stdin:
    r = json.loads(line)
    if r["name"] == "seq_len": entry = r["entry"]
print(entry)')
  sync
  "$python" - "$entry" "$work/copy" >> "$work/runs.jsonl" <<'PY'
import json, os, subprocess, sys, time
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
    if run["name"] not in best or run["seconds"] < best[run["name"]]["seconds"]:
        best[run["name"]] = run
cp_sync = min(r["with_sync"] for r in runs if r["name"] == "cp")
fresh = best["fresh"]
print(f"corpus: {sys.argv[2]}; {fresh['tokens'] / 1e6:.1f} M tokens in rows of 1024; best of {sum(r['name'] == 'fresh' for r in runs)} rounds")
print(f"fresh build (tokenize + view)   {fresh['seconds']:6.2f} s  peak RSS {fresh['peak_rss_bytes'] / 2**20:.0f} MiB")
for name in ["seq_len", "labels", "megatron", "best_fit_2048", "best_fit_4096", "olmo"]:
    r = best[name]
    assert not r["tokenized"], f"{name} tokenized again"
    fill = f"  fill {r['packing']['fill'] * 100:.2f}%" if r["packing"]["pack"] == "best_fit" else ""
    print(f"view {name:26s} {r['seconds']:6.2f} s  {r['arrow_bytes'] / r['seconds'] / 1e9:5.2f} GB/s of Arrow token files, "
          f"{r['bytes'] / r['seconds'] / 1e9:5.2f} GB/s of all its {r['bytes'] / 1e6:.0f} MB; {fresh['seconds'] / r['seconds']:5.1f}x faster than fresh{fill}")
ratio = fresh["seconds"] / best["olmo"]["seconds"]
print(f"ratio fresh build / the same spec with the olmo format added {ratio:6.2f}x  (target >= 5x)  {'OK' if ratio >= 5 else 'MISSED'}")
view = best["seq_len"]
cp = best["cp"]
ratio = fresh["seconds"] / view["seconds"]
print(f"cp -r of the seq_len view        {cp['seconds']:6.2f} s, {cp_sync:.2f} s with sync")
print(f"ratio fresh build / seq_len view {ratio:6.2f}x  (target >= 5x)  {'OK' if ratio >= 5 else 'MISSED'}")
ratio = view["seconds"] / cp_sync
print(f"ratio seq_len view / (cp + sync) {ratio:6.2f}   (target <= 2)   {'OK' if ratio <= 2 else 'MISSED'}; "
      f"against cp alone {view['seconds'] / cp['seconds']:.2f}")
for name in ["best_fit_2048", "best_fit_4096"]:
    fill = best[name]["packing"]["fill"]
    print(f"best_fit fill at {name[-4:]}           {fill * 100:6.2f}%  (target >= 99%)  {'OK' if fill >= 0.99 else 'MISSED'}; "
          f"{best[name]['packing']['documents_split']} documents split")
PY
