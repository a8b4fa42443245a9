#!/usr/bin/env bash
# Benchmark (not a test): staging one entry onto the three nodes of the multi-node
# test bed (scripts/slurm/multinode.sh: $SCRATCH on a GlusterFS volume, each node its
# own FUSE client and local disk), in one run on the same entry:
#   ferry stage on every node          srun --ntasks-per-node=1 ferry stage SPEC
#   ferry stage --broadcast            ferry stage SPEC --broadcast, then the srun above
#   cp -r on every node                srun --ntasks-per-node=1 cp -r ENTRY $SLURM_TMPDIR
#   an sbcast loop                     one sbcast per file of the entry, as a user would script it
# For each: the bytes the volume's brick served (GlusterFS's `volume profile`
# counters: what the shared filesystem read) and the wall time of the staging part of
# the job. Every node of this test bed shares one machine, so the times show the cost
# of the extra steps, not a network's bandwidth; the bytes are what a real cluster's
# shared filesystem would serve.
#
# Usage (as root): scripts/bench-broadcast.sh [TEXT_MB, default 200]
# BENCH_ROUNDS (default 2) rounds; the page cache is dropped before every run.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
text_mb=${1:-200}
rounds=${BENCH_ROUNDS:-2}
work=${BENCH_DIR:-$root/target/bench-broadcast}
python=${PYTHON:-$root/target/test-venv/bin/python}
say() { printf '==> %s\n' "$*" >&2; }
[ "$(id -u)" = 0 ] || { echo "the multi-node test bed needs root" >&2; exit 1; }

cargo build --release --quiet
ferry="$root/target/release/ferry"
mkdir -p "$work"
scripts/bench-corpus.sh "$work/corpus" "$text_mb" "$python" "$ferry"

cluster="$work/cluster"
say "starting the three-node cluster on GlusterFS in $cluster"
export SLURM_CONF
SLURM_CONF=$(scripts/slurm/multinode.sh start "$cluster" 3)
trap 'scripts/slurm/multinode.sh stop "$cluster"' EXIT
gluster_profile() {
  gluster --mode=script --glusterd-sock="$(cat "$cluster/gluster-socket")" volume profile "$(cat "$cluster/gluster-volume")" "$@"
}

bench="$cluster/scratch/bench"
mkdir -p "$bench"
say "copying the corpus onto the volume and preparing it there"
cp -r "$work/corpus" "$bench/corpus"
printf 'name = "bench-broadcast"\n[splits]\ntrain = ["corpus/*.jsonl.zst"]\n[tokenizer]\nbuiltin = "gpt2"\n[sequence]\nseq_len = 1024\n' > "$bench/spec.toml"
export FERRY_CACHE="$bench/cache" PATH="$root/target/release:$PATH"
"$ferry" prepare "$bench/spec.toml" --json > "$work/prepare.json"
entry=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["entry"])' "$work/prepare.json")
entry_bytes=$(du -sb --apparent-size "$entry" | cut -f1)
files=$(find "$entry" -type f | wc -l)
say "entry: $entry_bytes bytes in $files files"

# Each job prints the seconds its staging took; it runs with the cache on the volume.
declare -A scripts
scripts[ferry-stage]='srun --ntasks-per-node=1 ferry stage "$SPEC" > /dev/null'
scripts[ferry-broadcast]='ferry stage "$SPEC" --broadcast > /dev/null && srun --ntasks-per-node=1 ferry stage "$SPEC" > /dev/null'
scripts[cp-r]='srun --ntasks-per-node=1 cp -r "$ENTRY" "$SLURM_TMPDIR/"'
scripts[sbcast-loop]='cd "$ENTRY" && find . -type f | while read -r f; do sbcast --force "$f" "$SLURM_TMPDIR/$(echo "${f#./}" | tr / _)"; done'
methods=(ferry-stage ferry-broadcast cp-r sbcast-loop)

results="$work/results.tsv"
: > "$results"
for round in $(seq "$rounds"); do
  for method in "${methods[@]}"; do
    cat > "$bench/job.sh" <<JOB
#!/bin/bash
set -euo pipefail
start=\$EPOCHREALTIME
${scripts[$method]}
awk -v a="\$start" -v b="\$EPOCHREALTIME" 'BEGIN { printf "%.3f\n", b - a }'
JOB
    sync; echo 3 > /proc/sys/vm/drop_caches
    gluster_profile info clear > /dev/null
    (cd "$bench" && SPEC="$bench/spec.toml" ENTRY="$entry" sbatch --wait --quiet --nodes=3 --exclusive --output="$bench/job.out" job.sh)
    seconds=$(tail -n 1 "$bench/job.out")
    read_bytes=$(gluster_profile info cumulative | awk '/Data Read:/ { print $3; exit }')
    printf '%s\t%s\t%s\t%s\n' "$round" "$method" "$seconds" "$read_bytes" | tee -a "$results" >&2
  done
done

echo
echo "entry: $entry_bytes bytes in $files files, staged onto 3 nodes; the median of $rounds round(s) (the lower middle one of an even number)"
printf '%-18s %10s %16s %12s\n' method seconds "bytes read" "x entry"
for method in "${methods[@]}"; do
  seconds=$(awk -F'\t' -v m="$method" '$2 == m { print $3 }' "$results" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
  read_bytes=$(awk -F'\t' -v m="$method" '$2 == m { print $4 }' "$results" | sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }')
  printf '%-18s %10s %16s %12.2f\n' "$method" "$seconds" "$read_bytes" "$(awk -v r="$read_bytes" -v e="$entry_bytes" 'BEGIN { print r / e }')"
done
