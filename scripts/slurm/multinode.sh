#!/usr/bin/env bash
# Starts or stops a Slurm cluster of several nodes on one machine, for the
# multi-node tests:
#   scripts/slurm/multinode.sh start DIR [NODES]  -> prints the SLURM_CONF path
#   scripts/slurm/multinode.sh stop DIR           -> stops what it started, unmounts,
#                                                    deletes its network
#
# Each node is a slurmd in its own network namespace (a veth pair to a bridge, its
# own address in a private /24), UTS namespace (its own host name) and mount
# namespace. $SCRATCH is a GlusterFS volume served from the controller's address
# (one brick, DIR/gluster/brick); every node mounts it at DIR/scratch with its own
# FUSE client, as the nodes of a cluster each mount the shared filesystem, and the
# machine itself mounts it there too (the tests' view). Each node's local disk
# (DIR/nodes/NODE/tmp) is bind-mounted at DIR/localscratch in its namespace, so
# SLURM_TMPDIR (DIR/localscratch/job_<id>) reads the same on every node of a job,
# as /localscratch/<user>.<jobid>.0 does on a real cluster. One slurmctld listens
# on the bridge's address and one munged (its own socket under DIR) serves them
# all: a unix socket on the filesystem is reachable from every network namespace.
#
# It coexists with the one-node cluster of cluster.sh: other ports (6827/6828),
# another state directory, its own munged, and a glusterd of its own (its state in
# DIR/gluster, its port 24007 bound to the bridge's address only). Environment:
# FERRY_MULTINODE_SUBNET (first three octets of the /24, default 10.213.77),
# FERRY_MULTINODE_PREFIX (names of the namespaces, veths, bridge and volume,
# default "fmn").
# Needs root, iproute2, unshare and nsenter (util-linux), /dev/fuse, and Debian's
# slurm-wlm, munge, glusterfs-server and glusterfs-client.
set -euo pipefail
action=${1:?start|stop}
dir=$(realpath -m "${2:?state directory}")
nodes=${3:-3}
subnet=${FERRY_MULTINODE_SUBNET:-10.213.77}
prefix=${FERRY_MULTINODE_PREFIX:-fmn}
bridge="${prefix}br0"
volume="${prefix}scratch"
gluster_dir="$dir/gluster"
# shellcheck source=scripts/slurm/stop-pids.sh
. "$(cd "$(dirname "$0")" && pwd)/stop-pids.sh"

stop() {
  # The machine's own mount first: a FUSE mount whose client is gone leaves a dead path.
  umount -l "$dir/scratch" 2>/dev/null || true
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
rm -rf "$gluster_dir"
mkdir -p "$dir"/{state,run,log,scratch,localscratch,munge} "$gluster_dir"/{lib,run,log,brick}
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
TmpFS=$dir/localscratch
PrologFlags=Alloc
Prolog=$dir/prolog.sh
TaskProlog=$dir/taskprolog.sh
Epilog=$dir/epilog.sh
InactiveLimit=0
KillWait=5
MinJobAge=60
${node_lines}PartitionName=multi Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
# They run in the node's mount namespace: DIR/localscratch is that node's own disk.
cat > "$dir/prolog.sh" <<SH
#!/bin/sh
mkdir -p "$dir/localscratch/job_\$SLURM_JOB_ID"
chown "\$SLURM_JOB_UID" "$dir/localscratch/job_\$SLURM_JOB_ID"
SH
cat > "$dir/taskprolog.sh" <<SH
#!/bin/sh
echo "export SLURM_TMPDIR=$dir/localscratch/job_\$SLURM_JOB_ID"
echo "export SCRATCH=$dir/scratch"
SH
cat > "$dir/epilog.sh" <<SH
#!/bin/sh
rm -rf "$dir/localscratch/job_\$SLURM_JOB_ID"
SH
chmod +x "$dir"/*.sh
export SLURM_CONF="$dir/slurm.conf"

# --- The shared filesystem: glusterd with its state under DIR, one brick, one volume.
cat > "$gluster_dir/glusterd.vol" <<VOL
volume management
    type mgmt/glusterd
    option working-directory $gluster_dir/lib
    option glusterd-sockfile $gluster_dir/run/cli.socket
    option transport-type socket
    option transport.socket.bind-address $subnet.1
    option transport.socket.listen-port 24007
    option ping-timeout 0
    option event-threads 1
end-volume
VOL
glusterd -N -f "$gluster_dir/glusterd.vol" -p "$gluster_dir/run/glusterd.pid" -l "$gluster_dir/log/glusterd.log" \
  > "$gluster_dir/log/glusterd.out" 2>&1 &
echo $! >> "$dir/pids"
for _ in $(seq 100); do [ -S "$gluster_dir/run/cli.socket" ] && break; sleep 0.1; done
gluster_cli() { gluster --mode=script --glusterd-sock="$gluster_dir/run/cli.socket" "$@"; }
gluster_cli volume create "$volume" "$subnet.1:$gluster_dir/brick" force > /dev/null
rm -rf "/var/run/gluster/vols/$volume" # an earlier brick's pid file would be read below
gluster_cli volume start "$volume" > /dev/null
cat /var/run/gluster/vols/"$volume"/*.pid >> "$dir/pids"
# Per-brick counters (bytes read, calls): tests and benchmarks measure what reads the shared copy.
gluster_cli volume profile "$volume" start > /dev/null
echo "$gluster_dir/run/cli.socket" > "$dir/gluster-socket"
echo "$volume" > "$dir/gluster-volume"

# --- Munge and Slurm; every pid recorded before the next starts.
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

# mount_gluster NAME [FUSE OPTIONS]: this namespace's own client of the volume at
# DIR/scratch, its pid recorded once it has mounted.
mount_gluster() {
  local name=$1
  shift
  glusterfs --volfile-server="$subnet.1" --volfile-id="$volume" "$@" \
    --pid-file="$gluster_dir/run/client-$name.pid" --log-file="$gluster_dir/log/client-$name.log" "$dir/scratch"
  for _ in $(seq 100); do mountpoint -q "$dir/scratch" && break; sleep 0.1; done
  cat "$gluster_dir/run/client-$name.pid" >> "$dir/pids"
  mountpoint -q "$dir/scratch" || { echo "$name could not mount the volume (log: $gluster_dir/log/client-$name.log)" >&2; return 1; }
}
export -f mount_gluster
export dir subnet volume gluster_dir
for k in $(seq "$nodes"); do
  # nsenter rather than `ip netns exec`, which remounts /sys (slurmd needs its cgroup mount).
  # In the node's own mount namespace: its client of the volume, its disk at localscratch.
  nsenter --net="/run/netns/$prefix-node$k" unshare --uts --mount --propagation private bash -c '
    set -e
    hostname "$1"
    mount_gluster "$1"
    mount --bind "$dir/nodes/$1/tmp" "$dir/localscratch"
    exec slurmd -D -N "$1" -f "$2"' sh "node$k" "$SLURM_CONF" \
    > "$dir/log/slurmd-node$k.out" 2>&1 &
  echo $! >> "$dir/pids"
done
# The machine's own client, last (the nodes' namespaces must not copy it): the tests'
# view. It caches no names, attributes or small files, so what a test sees is what
# the volume holds now; the nodes' clients keep the defaults a cluster would have.
mount_gluster host --entry-timeout=0 --attribute-timeout=0 --negative-timeout=0 \
  --xlator-option="$volume-md-cache.md-cache-timeout=0" --xlator-option="$volume-quick-read.cache-timeout=0"
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
