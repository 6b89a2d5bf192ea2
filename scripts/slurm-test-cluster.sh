#!/usr/bin/env bash
# A one-node SLURM cluster on loopback, for the cluster test (tests/test_slurm.py) and for
# trying profiles/slurm on one machine. Debian 12's slurm-wlm 22.05 + munge; needs root.
#
#   bash scripts/slurm-test-cluster.sh start   # install if missing, configure, start, wait until idle
#   bash scripts/slurm-test-cluster.sh stop
#
# The node offers one GPU as a GRES backed by a stand-in device file (`Name=gpu
# File=/dev/null`; slurmd counts GPUs by their files), so `sbatch
# --gpus=1` is scheduled exactly as on a GPU cluster (one GPU job at a time here) while
# the job itself runs on the CPU. Job status: squeue keeps finished jobs for MinJobAge
# (3600 s), which the Snakemake SLURM plugin reads with `--slurm-status-command squeue`;
# job history: every finished job is appended to the job-completion log (jobcomp/filetxt,
# $JOBCOMP). No accounting database (slurmdbd) is needed.
set -euo pipefail

STATE=${SLURM_TEST_STATE:-/var/lib/replaykit-slurm}
JOBCOMP=$STATE/jobcomp.log
CONF=/etc/slurm/slurm.conf

die() { echo "error: slurm-test-cluster: $*" >&2; exit 1; }

install_packages() {
  [ "$(id -u)" = 0 ] || die "needs root to install slurm-wlm and munge"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -o DPkg::Lock::Timeout=300 -y -q --no-install-recommends slurm-wlm munge >/dev/null \
    || { apt-get update -q >/dev/null && apt-get install -o DPkg::Lock::Timeout=300 -y -q --no-install-recommends slurm-wlm munge >/dev/null; } \
    || die "apt-get install slurm-wlm munge failed"
}

running() { pgrep -x "$1" >/dev/null; }

write_config() {
  local host cpus mem
  host=$(hostname -s)
  cpus=$(nproc)
  mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 1024 ))
  mkdir -p "$STATE/ctld" "$STATE/slurmd" /etc/slurm
  cat > "$CONF.tmp" <<CONF
# written by scripts/slurm-test-cluster.sh (one-node test cluster on loopback)
ClusterName=replaykit-test
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/slurmd
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$STATE/slurmctld.log
SlurmdLogFile=$STATE/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
ReturnToService=2
MinJobAge=3600
KillWait=10
JobCompType=jobcomp/filetxt
JobCompLoc=$JOBCOMP
AccountingStorageType=accounting_storage/none
MpiDefault=none
NodeName=$host NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem Gres=gpu:1 State=UNKNOWN
PartitionName=main Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
  mv "$CONF.tmp" "$CONF"
  echo "NodeName=$host Name=gpu File=/dev/null" > /etc/slurm/gres.conf  # stand-in device file
}

start() {
  command -v slurmctld >/dev/null && command -v munged >/dev/null || install_packages
  [ "$(id -u)" = 0 ] || die "needs root to start munged, slurmctld and slurmd"
  write_config
  if ! running munged; then
    [ -s /etc/munge/munge.key ] || mungekey --create --keyfile=/etc/munge/munge.key
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /etc/munge/munge.key /run/munge /var/log/munge /var/lib/munge
    chmod 0400 /etc/munge/munge.key
    runuser -u munge -- /usr/sbin/munged </dev/null >/dev/null 2>&1
  fi
  running slurmctld || slurmctld </dev/null >/dev/null 2>&1
  running slurmd || slurmd </dev/null >/dev/null 2>&1
  for _ in $(seq 60); do
    state=$(sinfo -h -N -o %T 2>/dev/null | head -1 || true)
    case "$state" in
      idle|mixed|allocated) echo "slurm test cluster up: node $(hostname -s) $state, $(nproc) CPUs, gres gpu:1; job history $JOBCOMP"; return 0 ;;
      drain*|down*) scontrol update nodename="$(hostname -s)" state=resume 2>/dev/null || true ;;
    esac
    sleep 1
  done
  tail -3 "$STATE/slurmctld.log" >&2 || true
  die "the node did not become idle in 60 s (see $STATE/slurmctld.log, $STATE/slurmd.log)"
}

stop() {
  pkill -x slurmd || true
  pkill -x slurmctld || true
  for i in $(seq 40); do
    running slurmd || running slurmctld || return 0
    [ "$i" = 20 ] && { pkill -9 -x slurmd || true; pkill -9 -x slurmctld || true; }  # a slurmd retrying registration ignores SIGTERM
    sleep 0.5
  done
  die "slurmd/slurmctld still running after 20 s"
}

case "${1:-start}" in
  start) start ;;
  stop) stop ;;
  *) die "usage: $0 start|stop" ;;
esac
