#!/usr/bin/env bash
# .ci/system-setup.sh — the `system` tests' world on one Debian 12 machine, as root: a real single-node Slurm
# (Debian's slurm-wlm, munge), Lmod, shellcheck, xmllint, and TensorBoard (pip, in a venv). Idempotent: run it
# as often as you like; packages are installed only when missing, daemons started only when not running.
#
#   bash .ci/system-setup.sh          # install + configure + start
#   bash .ci/system-setup.sh status   # what is running
#   bash .ci/system-setup.sh stop     # stop slurmd, slurmctld, munged (started by this script)
#
# The cluster (docs/hpc.md, "Testing the scripts"): six slurmd on this one machine, each a node shaped like a
# shipped script's target through SlurmdParameters=config_overrides (declared CPUs/memory are taken as real) and
# gres GPUs whose device files are copies of /dev/null (counted by the scheduler; nothing binds or opens them):
#   partition cpu (default): $(hostname -s), 128 CPUs, 8 GPUs  — demo and prepare jobs run here, for real
#   partition gpu4090:       the same node                     — slurm/qwen14b_8x4090.sh
#   partition a100:          a100n1, 64 CPUs, 4 GPUs           — slurm/qwen14b_4xa100.sh, slurm/sweep_lr.sh
#   partition h200:          h200n[1-4], 128 CPUs, 8 GPUs each — slurm/multinode.sh
# Accounting is off; ProctrackType=proctrack/linuxproc, TaskPlugin=task/none (no cgroups needed), MpiDefault=pmix.
# Environment: QWENFT_CI_VENV (default /opt/qwen-ft-ci/venv): where TensorBoard is installed when the system
# python3 cannot import it.
set -euo pipefail
mode=${1:-setup}
[ "$(id -u)" -eq 0 ] || { echo "system-setup: must run as root (it installs packages and starts daemons)" >&2; exit 1; }

PKGS=(slurm-wlm slurm-client munge lmod shellcheck libxml2-utils python3 python3-venv procps)
VENV=${QWENFT_CI_VENV:-/opt/qwen-ft-ci/venv}
CONF=/etc/slurm
HOST=$(hostname -s)

install_pkgs() {
  local missing=() p
  for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "system-setup: installing ${missing[*]}"
    apt-get update -q
    # environment-modules conflicts with lmod; Lmod also reads the Tcl modulefile
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  fi
  if ! python3 -c 'import tensorboard' 2>/dev/null && ! "$VENV/bin/python" -c 'import tensorboard' 2>/dev/null; then
    echo "system-setup: installing TensorBoard into $VENV (PyPI)"
    python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --upgrade pip
    "$VENV/bin/python" -m pip install -q tensorboard
  fi
}

start_munge() {
  if running /run/munge/munged.pid && munge -n > /dev/null 2>&1; then return; fi
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  chown munge:munge /run/munge /var/log/munge /var/lib/munge /etc/munge
  chmod 0755 /run/munge
  chmod 0700 /etc/munge /var/log/munge /var/lib/munge
  if [ ! -s /etc/munge/munge.key ]; then
    if command -v mungekey > /dev/null; then mungekey --create --keyfile=/etc/munge/munge.key
    else dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none; fi
  fi
  chown munge:munge /etc/munge/munge.key
  chmod 0400 /etc/munge/munge.key
  runuser -u munge -- /usr/sbin/munged
  for _ in $(seq 1 50); do munge -n > /dev/null 2>&1 && break; sleep 0.1; done
  munge -n | unmunge > /dev/null || { echo "system-setup: munged does not answer" >&2; exit 1; }
}

# Fake GPU device files for gres.conf: Slurm counts only GPUs with a File, and checks that it is a character
# device. These are copies of /dev/null (1,3); with TaskPlugin=task/none nothing constrains or opens them.
FAKE_DEV=/var/lib/qwen-ft-ci
fake_gpus() {
  mkdir -p "$FAKE_DEV"
  local i
  for i in 0 1 2 3 4 5 6 7; do [ -c "$FAKE_DEV/gpu$i" ] || mknod "$FAKE_DEV/gpu$i" c 1 3; done
}

write_conf() {
  mkdir -p "$CONF" /var/spool/slurmctld /var/spool/slurmd /var/log/slurm
  # Several slurmd on one machine (NodeNames a100n1, h200n[1-4] on their own ports) need a slurmd built with
  # --enable-multiple-slurmd (Debian's is); QWENFT_CI_MULTI_SLURMD=no puts every partition on this one node.
  local nodes parts gres
  if [ "${QWENFT_CI_MULTI_SLURMD:-yes}" != no ]; then
    nodes="NodeName=$HOST NodeAddr=127.0.0.1 CPUs=128 RealMemory=512000 Gres=gpu:8 State=UNKNOWN
NodeName=a100n1 NodeHostname=$HOST NodeAddr=127.0.0.1 Port=6820 CPUs=64 RealMemory=1000000 Gres=gpu:4 State=UNKNOWN
NodeName=h200n[1-4] NodeHostname=$HOST NodeAddr=127.0.0.1 Port=[6821-6824] CPUs=128 RealMemory=2000000 Gres=gpu:8 State=UNKNOWN"
    parts="PartitionName=cpu Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
PartitionName=gpu4090 Nodes=$HOST MaxTime=INFINITE State=UP
PartitionName=a100 Nodes=a100n1 MaxTime=INFINITE State=UP
PartitionName=h200 Nodes=h200n[1-4] MaxTime=INFINITE State=UP"
    gres="NodeName=$HOST,h200n[1-4] Name=gpu File=$FAKE_DEV/gpu[0-7]
NodeName=a100n1 Name=gpu File=$FAKE_DEV/gpu[0-3]"
  else
    nodes="NodeName=$HOST NodeAddr=127.0.0.1 CPUs=128 RealMemory=512000 Gres=gpu:8 State=UNKNOWN"
    parts="PartitionName=cpu Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
PartitionName=gpu4090 Nodes=$HOST MaxTime=INFINITE State=UP
PartitionName=a100 Nodes=$HOST MaxTime=INFINITE State=UP
PartitionName=h200 Nodes=$HOST MaxTime=INFINITE State=UP"
    gres="Name=gpu File=$FAKE_DEV/gpu[0-7]"
  fi
  local new
  new=$(cat <<EOF
# generated by .ci/system-setup.sh — a single-machine test cluster for qwen-ft's system tests
ClusterName=qwenft-ci
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# a requeued job may start again once its old credential expired (default 120 s): 10 s keeps the requeue test short
AuthInfo=cred_expire=10
MpiDefault=pmix
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
JobRequeue=1
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
SlurmdParameters=config_overrides
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd/%n
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd-%n.log
SlurmctldPort=6817
SlurmdPort=6818
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge=600
KillWait=30
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=60
# nodes shaped like the shipped scripts' targets (config_overrides: the declared CPUs and memory are used)
$nodes
$parts
EOF
)
  gres="# generated by .ci/system-setup.sh: GPUs whose device files are copies of /dev/null
$gres"
  local changed=0
  if [ ! -f "$CONF/slurm.conf" ] || [ "$(cat "$CONF/slurm.conf")" != "$new" ]; then
    printf '%s\n' "$new" > "$CONF/slurm.conf"; changed=1
  fi
  if [ ! -f "$CONF/gres.conf" ] || [ "$(cat "$CONF/gres.conf")" != "$gres" ]; then
    printf '%s\n' "$gres" > "$CONF/gres.conf"; changed=1
  fi
  echo "$changed"
}

slurm_nodes() { # the NodeNames this machine runs a slurmd for
  echo "$HOST"
  if grep -q '^NodeName=h200n' "$CONF/slurm.conf"; then printf '%s\n' a100n1 h200n1 h200n2 h200n3 h200n4; fi
}

# running PIDFILE: the daemon of that pid file is alive
running() { [ -s "$1" ] && kill -0 "$(cat "$1")" 2> /dev/null; }
# stop PIDFILE: ends that daemon (only the daemons this configuration runs, found by their pid files)
stop_pid() {
  running "$1" || return 0
  local p; p=$(cat "$1")
  kill "$p" 2> /dev/null || true
  for _ in $(seq 1 50); do kill -0 "$p" 2> /dev/null || return 0; sleep 0.2; done
}

start_slurm() {
  local changed=$1 n
  if [ "$changed" = 1 ]; then stop_slurm; fi
  # -i: ignore state saved by an earlier configuration
  running /run/slurmctld.pid || slurmctld -i
  for n in $(slurm_nodes); do
    mkdir -p "/var/spool/slurmd/$n"
    running "/run/slurmd-$n.pid" || slurmd -N "$n"
  done
  for _ in $(seq 1 100); do scontrol ping 2> /dev/null | grep -q UP && break; sleep 0.2; done
  scontrol ping | grep -q UP || { echo "system-setup: slurmctld does not answer; see /var/log/slurm/slurmctld.log" >&2; exit 1; }
  # nodes come up IDLE once their slurmd registered; resume any that an earlier configuration left DOWN/DRAIN
  for _ in $(seq 1 100); do
    [ -z "$(sinfo -h -N -t unknown,down,drain,fail,not_responding -o %N 2> /dev/null)" ] && break
    for n in $(sinfo -h -N -t down,drain,fail -o %N 2> /dev/null | sort -u); do
      scontrol update nodename="$n" state=resume 2> /dev/null || true
    done
    sleep 0.3
  done
  sinfo
}

stop_slurm() {
  local f
  for f in /run/slurmd-*.pid; do [ -e "$f" ] && stop_pid "$f"; done
  stop_pid /run/slurmctld.pid
}

case "$mode" in
  setup)
    install_pkgs
    start_munge
    fake_gpus
    changed=$(write_conf)
    start_slurm "$changed"
    lmod_dir=$(readlink -f /usr/share/lmod/lmod)
    echo "system-setup: Slurm $(sinfo --version | cut -d' ' -f2) up; Lmod ${lmod_dir##*/}; shellcheck $(shellcheck --version | sed -n 's/^version: //p')"
    ;;
  status)
    for f in /run/munge/munged.pid /run/slurmctld.pid /run/slurmd-*.pid; do
      if running "$f"; then echo "running: $f ($(cat "$f"))"; else echo "not running: $f"; fi
    done
    sinfo 2> /dev/null || echo "slurmctld does not answer"
    ;;
  stop)
    stop_slurm
    stop_pid /run/munge/munged.pid
    ;;
  *) echo "usage: .ci/system-setup.sh [setup|status|stop]" >&2; exit 2 ;;
esac
