#!/bin/sh
# Example Slurm Prolog for sites running ferry.service on every node: when a job
# asks for a dataset with `sbatch --comment=ferry:<fingerprint>`, start staging it
# into the job's node-local directory before the job begins, as the job's user.
# The job then runs `ferry wait` (or `ferry stage`, which finds the work done).
# Configure: Prolog=/etc/slurm/prolog-daemon.sh, with TMPDIR_ROOT set below.
TMPDIR_ROOT=${TMPDIR_ROOT:-/localscratch}
entry=$(scontrol show job -o "$SLURM_JOB_ID" | grep -o 'Comment=ferry:[0-9a-f]*' | cut -d: -f2)
[ -n "$entry" ] || exit 0
dest="$TMPDIR_ROOT/job_$SLURM_JOB_ID/ferry"
ferry request "{\"type\": \"stage\", \"entry\": \"$entry\", \"dest\": \"$dest\", \"uid\": $SLURM_JOB_UID}" \
  >> /var/log/ferry-prolog.log 2>&1 || true
exit 0
