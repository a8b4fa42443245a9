#!/usr/bin/env bash
# Starts or stops a Slurm cluster of several nodes on one machine, for the
# multi-node tests:
#   scripts/slurm/multinode.sh start DIR [NODES]  -> prints the SLURM_CONF path
#   scripts/slurm/multinode.sh stop DIR           -> stops what it started, deletes its network
#
# Each node is a slurmd in its own network namespace (a veth pair to a bridge, its
# own address in a private /24) and its own UTS namespace (its own host name), with
# its own node-local directory for SLURM_TMPDIR (DIR/nodes/NODE/tmp). Every node
# shares DIR/scratch as $SCRATCH. One slurmctld listens on the bridge's address and
# one munged (its own socket under DIR) serves them all: a unix socket on the
# filesystem is reachable from every network namespace.
#
# It coexists with the one-node cluster of cluster.sh: other ports (6827/6828),
# another state directory, its own munged. Environment: FERRY_MULTINODE_SUBNET
# (first three octets of the /24, default 10.213.77), FERRY_MULTINODE_PREFIX
# (names of the namespaces, veths and bridge, default "fmn").
# Needs root, iproute2, unshare (util-linux) and Debian's slurm-wlm + munge.
set -euo pipefail
action=${1:?start|stop}
dir=$(realpath -m "${2:?state directory}")
nodes=${3:-3}
subnet=${FERRY_MULTINODE_SUBNET:-10.213.77}
prefix=${FERRY_MULTINODE_PREFIX:-fmn}
bridge="${prefix}br0"
# shellcheck source=scripts/slurm/stop-pids.sh
. "$(cd "$(dirname "$0")" && pwd)/stop-pids.sh"

stop() {
  stop_pids "$dir/pids"
  if [ -f "$dir/network" ]; then
    # What is left in a node's namespace was started by its slurmd (steps, jobs).
    while read -r kind name; do
      [ "$kind" = netns ] || continue
      for pid in $(ip netns pids "$name" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    done < "$dir/network"
    while read -r kind name; do
      case $kind in
        netns) ip netns del "$name" 2>/dev/null || true ;;
        link) ip link del "$name" 2>/dev/null || true ;;
      esac
    done < "$dir/network"
    rm -f "$dir/network"
  fi
}

if [ "$action" = stop ]; then stop; exit 0; fi

stop
if ip link show "$bridge" >/dev/null 2>&1; then
  echo "a network device $bridge exists and was not made for $dir; set FERRY_MULTINODE_PREFIX" >&2
  exit 1
fi
trap 'echo "setting up the cluster failed; undoing what was set up" >&2; stop' ERR
mkdir -p "$dir"/{state,run,log,scratch,munge}
: > "$dir/network"
: > "$dir/pids"

# --- The network: a bridge holding the controller's address, one namespace per node.
ip link add "$bridge" type bridge
echo "link $bridge" >> "$dir/network"
ip addr add "$subnet.1/24" dev "$bridge"
ip link set "$bridge" up
node_lines=""
for k in $(seq "$nodes"); do
  name="node$k" netns="$prefix-node$k" veth="${prefix}veth$k" address="$subnet.$((10 + k))"
  ip netns add "$netns"
  echo "netns $netns" >> "$dir/network"
  ip link add "$veth" type veth peer name eth0 netns "$netns"
  echo "link $veth" >> "$dir/network"
  ip link set "$veth" master "$bridge" up
  ip -n "$netns" addr add "$address/24" dev eth0
  ip -n "$netns" link set eth0 up
  ip -n "$netns" link set lo up
  mkdir -p "$dir/nodes/$name"/{tmp,spool}
  node_lines+="NodeName=$name NodeHostname=$name NodeAddr=$address CPUs=2 RealMemory=2000 TmpDisk=1000 State=UNKNOWN"$'\n'
done

# --- Slurm's config and the node-local scratch scripts, keyed on the node's name.
cat > "$dir/slurm.conf" <<CONF
# A Slurm cluster of $nodes nodes on one machine (scripts/slurm/multinode.sh).
ClusterName=ferrymulti
SlurmctldHost=ferryctl($subnet.1)
SlurmUser=root
SlurmdUser=root
SlurmctldPort=6827
SlurmdPort=6828
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/nodes/%n/spool
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/nodes/%n/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/nodes/%n/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
TmpFS=$dir/scratch
PrologFlags=Alloc
Prolog=$dir/prolog.sh
TaskProlog=$dir/taskprolog.sh
Epilog=$dir/epilog.sh
InactiveLimit=0
KillWait=5
MinJobAge=60
${node_lines}PartitionName=multi Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
cat > "$dir/prolog.sh" <<SH
#!/bin/sh
mkdir -p "$dir/nodes/\$SLURMD_NODENAME/tmp/job_\$SLURM_JOB_ID"
chown "\$SLURM_JOB_UID" "$dir/nodes/\$SLURMD_NODENAME/tmp/job_\$SLURM_JOB_ID"
SH
cat > "$dir/taskprolog.sh" <<SH
#!/bin/sh
echo "export SLURM_TMPDIR=$dir/nodes/\$SLURMD_NODENAME/tmp/job_\$SLURM_JOB_ID"
echo "export SCRATCH=$dir/scratch"
SH
cat > "$dir/epilog.sh" <<SH
#!/bin/sh
rm -rf "$dir/nodes/\$SLURMD_NODENAME/tmp/job_\$SLURM_JOB_ID"
SH
chmod +x "$dir"/*.sh
export SLURM_CONF="$dir/slurm.conf"

# --- The daemons; every pid recorded before the next starts.
chown munge:munge "$dir/munge"
chmod 711 "$dir/munge"
setpriv --reuid munge --regid munge --clear-groups \
  munged -F --socket="$dir/munge/munge.socket" --pid-file="$dir/munge/munged.pid" \
  --seed-file="$dir/munge/munged.seed" --log-file="$dir/munge/munged.log" > /dev/null 2>&1 &
echo $! >> "$dir/pids"
for _ in $(seq 50); do [ -S "$dir/munge/munge.socket" ] && break; sleep 0.1; done
if [ ! -S "$dir/munge/munge.socket" ]; then
  echo "munged did not start (its log: $dir/munge/munged.log)" >&2
  stop
  exit 1
fi
unshare --uts sh -c 'hostname ferryctl && exec slurmctld -D -i -f "$1"' sh "$SLURM_CONF" \
  > "$dir/log/slurmctld.out" 2>&1 &
echo $! >> "$dir/pids"
for k in $(seq "$nodes"); do
  # nsenter rather than `ip netns exec`, which remounts /sys (slurmd needs its cgroup mount).
  nsenter --net="/run/netns/$prefix-node$k" unshare --uts sh -c 'hostname "$1" && exec slurmd -D -N "$1" -f "$2"' sh "node$k" "$SLURM_CONF" \
    > "$dir/log/slurmd-node$k.out" 2>&1 &
  echo $! >> "$dir/pids"
done
for _ in $(seq 150); do
  while read -r pid; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "a daemon of the cluster exited (pid $pid); logs in $dir/log and $dir/nodes/*/slurmd.log" >&2
      stop
      exit 1
    fi
  done < "$dir/pids"
  if [ "$(sinfo -h -N -o '%N %T' 2>/dev/null | grep -c ' idle$')" = "$nodes" ]; then
    echo "$SLURM_CONF"
    exit 0
  fi
  sleep 0.2
done
echo "the $nodes Slurm nodes did not become idle; logs in $dir/log and $dir/nodes/*/slurmd.log" >&2
sinfo -N >&2 || true
stop
exit 1
