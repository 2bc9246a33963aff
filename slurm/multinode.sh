#!/bin/bash
# multinode.sh — template for several nodes of 8 GPUs (H100/H200 with NVLink and InfiniBand): one task per GPU on
# every node, the deck inputs/h200.cfg (ZeRO-3, bf16). Change --nodes (the batch rule: train_batch_size = micro x
# accumulation x all ranks, so the deck gives micro and accumulation and the global batch follows the node count).
#
#   sbatch --nodes=N multinode.sh [DECK.cfg] [--set key=value ...]   (deck default: $QWENFT_SHARE/inputs/h200.cfg)
#
# qwen-ft's run header lists every node, its GPUs, NVLink and InfiniBand, and the NCCL settings in force; put
# site settings (NCCL_IB_HCA, NCCL_SOCKET_IFNAME, ...) in the environment before srun: they always win.
# Checkpoints are written collectively by all ranks into checkpoint.dir, which must be on a shared file system.
# SIGUSR1 fifteen minutes before the time limit -> checkpoint, exit 0, requeue, resume (docs/hpc.md).
#SBATCH --job-name=qwen-ft-multinode
#SBATCH --partition=h200
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=12
#SBATCH --exclusive
#SBATCH --mem=0
#SBATCH --time=48:00:00
#SBATCH --signal=B:USR1@900
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=%x-%j.out
set -eo pipefail

# ---- signals: forward to the training step; requeue after a time-limit stop (same block in every script) -------
stop=''
srun_pid=''
# shellcheck disable=SC2317  # called by the traps below
forward() { # forward SIG: srun passes the signal on to every task (rank) of the step
  stop=$1
  echo "qwen-ft job: SIG$1 received at $(date +%T): asking the ranks to checkpoint and stop"
  if [ -n "$srun_pid" ]; then kill -s "$1" "$srun_pid" 2> /dev/null || true; fi
}
# a signal before training started (while data was prepared, say): nothing to checkpoint; requeue on SIGUSR1
not_yet() {
  if [ -n "$stop" ]; then
    echo "qwen-ft job: SIG$stop before training started"
    if [ "$stop" = USR1 ]; then scontrol requeue "${SLURM_JOB_ID}"; fi
    exit 0
  fi
}
wait_step() { # wait for srun; a trapped signal interrupts `wait` (status > 128) while the step goes on
  local rc r
  while :; do
    rc=0; wait "$1" || rc=$?
    if [ "$rc" -gt 128 ] && kill -0 "$1" 2> /dev/null; then continue; fi
    if [ "$rc" -gt 128 ]; then # srun ended just as the signal came: its own status, if bash still has it
      r=0; wait "$1" 2> /dev/null || r=$?
      [ "$r" -eq 127 ] || rc=$r
    fi
    return "$rc"
  done
}
trap 'forward USR1' USR1
trap 'forward TERM' TERM

# ---- environment: the batch shell may not have inherited the `module` function -------------------------------
if ! command -v module > /dev/null 2>&1; then
  for init in /usr/share/lmod/lmod/init/bash /etc/profile.d/lmod.sh /etc/profile.d/modules.sh; do
    # shellcheck source=/dev/null
    if [ -r "$init" ]; then . "$init"; break; fi
  done
fi
module load qwen-ft
DECK=${1:-$QWENFT_SHARE/inputs/h200.cfg}
[ $# -gt 0 ] && shift
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
echo "qwen-ft job ${SLURM_JOB_ID} (restart ${SLURM_RESTART_COUNT:-0}) on ${SLURM_JOB_NUM_NODES} nodes (${SLURM_JOB_NODELIST}): qwen-ft train ${DECK} $*"
not_yet
srun --mpi=pmix --nodes="${SLURM_JOB_NUM_NODES}" --ntasks-per-node=8 --gpus-per-node=8 --gpu-bind=none \
     --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}" qwen-ft train "$DECK" "$@" &
srun_pid=$!
rc=0; wait_step "$srun_pid" || rc=$?
if [ "$stop" = USR1 ] && [ "$rc" -eq 0 ]; then
  echo "qwen-ft job: checkpoint written; requeueing job ${SLURM_JOB_ID} to resume"
  scontrol requeue "${SLURM_JOB_ID}"
fi
exit "$rc"
