#!/usr/bin/env bash
# Starts or stops a one-node Slurm cluster for the end-to-end test.
#   scripts/slurm/cluster.sh start DIR   -> prints the SLURM_CONF path; daemons' pids in DIR/pids
#   scripts/slurm/cluster.sh stop DIR    -> stops exactly the daemons it started
# Needs root and Debian's slurm-wlm + munge.
set -euo pipefail
action=${1:?start|stop}
dir=$(realpath -m "${2:?state directory}")
here=$(cd "$(dirname "$0")" && pwd)

# shellcheck source=scripts/slurm/stop-pids.sh
. "$here/stop-pids.sh"
stop() { stop_pids "$dir/pids"; }

if [ "$action" = stop ]; then stop; exit 0; fi

stop
mkdir -p "$dir"/{state,spool,run,log,nodetmp}
sed "s|@DIR@|$dir|g" "$here/slurm.conf.template" > "$dir/slurm.conf"
cat > "$dir/prolog.sh" <<SH
#!/bin/sh
mkdir -p "$dir/nodetmp/job_\$SLURM_JOB_ID"
chown "\$SLURM_JOB_UID" "$dir/nodetmp/job_\$SLURM_JOB_ID"
SH
cat > "$dir/taskprolog.sh" <<SH
#!/bin/sh
echo "export SLURM_TMPDIR=$dir/nodetmp/job_\$SLURM_JOB_ID"
SH
cat > "$dir/epilog.sh" <<SH
#!/bin/sh
rm -rf "$dir/nodetmp/job_\$SLURM_JOB_ID"
SH
chmod +x "$dir"/*.sh
export SLURM_CONF="$dir/slurm.conf"

mkdir -p /run/munge && chown munge:munge /run/munge
runuser -u munge -- munged -F > "$dir/log/munged.log" 2>&1 &
echo $! > "$dir/pids"
for _ in $(seq 50); do [ -S /run/munge/munge.socket.2 ] && break; sleep 0.1; done
slurmctld -D -i -f "$SLURM_CONF" > "$dir/log/slurmctld.out" 2>&1 &
echo $! >> "$dir/pids"
slurmd -D -N localhost -f "$SLURM_CONF" > "$dir/log/slurmd.out" 2>&1 &
echo $! >> "$dir/pids"
for _ in $(seq 150); do
  if [ "$(sinfo -h -o %T 2>/dev/null | head -1)" = idle ]; then
    echo "$SLURM_CONF"
    exit 0
  fi
  sleep 0.2
done
echo "the Slurm node did not become idle; logs in $dir/log" >&2
stop
exit 1
