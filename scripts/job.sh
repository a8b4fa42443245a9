#!/usr/bin/env bash
# A complete training job with ferry: tokenize once into the shared cache, stage
# onto every node's local disk, then train offline from the local copies.
#
#   sbatch --nodes=2 scripts/job.sh pile.toml
#
# Environment: FERRY_CACHE (default $SCRATCH/ferry), PYTHON (default python3),
# FERRY_TRAINER (default scripts/train_example.py next to the submit directory).
#SBATCH --job-name=ferry-train
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --tmp=1G
#SBATCH --output=ferry-train-%j.out
set -euo pipefail
spec=${1:?usage: sbatch job.sh SPEC}
python=${PYTHON:-python3}
trainer=${FERRY_TRAINER:-$SLURM_SUBMIT_DIR/scripts/train_example.py}

# 1. Tokenize once, ever: a no-op (one stat per input) when the entry exists.
#    Several tasks (srun --ntasks=N ferry prepare) would share the shards.
prepared=$(ferry prepare "$spec" --json)
echo "$prepared"
name=$("$python" -c 'import json, sys; print(json.load(sys.stdin)["name"])' <<< "$prepared")

# 2. Once per node: mirror the cache as symlinks, copy this entry's files to local disk.
#    On several nodes, the shared copy is read once: sbcast first sends it to every
#    node, and each node's stage lands what arrived.
if [ "$SLURM_JOB_NUM_NODES" -gt 1 ]; then
  ferry stage "$spec" --broadcast
fi
srun --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 ferry stage "$spec"

# 3. What is cached, and this node's staging.
ferry status

# 4. Train from node-local files, offline.
HF_DATASETS_OFFLINE=1 srun --ntasks="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 \
  "$python" "$trainer" --data-name "$name"
