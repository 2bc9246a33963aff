#!/bin/bash
# qwen14b_8x4090.sh — Qwen-14B full fine-tuning on ONE node of 8 RTX 4090 (24 GB each, PCIe, no P2P, no
# InfiniBand): ZeRO-3 with optimizer and parameter offload to the CPU, fp16 (loss_scale_window 100), seq 512,
# micro batch 16 x accumulation 16 (the deck inputs/4090.cfg).
#
#   sbatch qwen14b_8x4090.sh [DECK.cfg] [--set key=value ...]     (deck default: $QWENFT_SHARE/inputs/4090.cfg)
#
# It runs in the directory you submit from (the deck's relative paths: qwen14b.h5, data/, ckpt/, logs/).
# qwen-ft sees that RTX 4090s have no P2P and sets NCCL_P2P_DISABLE=1 and NCCL_IB_DISABLE=1 itself (the run
# header says so); export your own values to override. Ten minutes before the time limit Slurm sends SIGUSR1 to
# this script, which forwards it to the training step: the ranks agree at the next step boundary, write a
# checkpoint and exit 0, and the job requeues itself and resumes (docs/hpc.md, "Signals and requeue").
# One task (MPI rank) per GPU, every GPU of the node visible to every rank (--gpu-bind=none: NCCL must see its
# peers; each rank picks GPU local_rank); 8 CPUs per task for the offloaded CPU AdamW; --mem=0 = all of the node's
# memory (the offload keeps about 14 bytes per parameter per node on the host, ~200 GB for 14B).
#SBATCH --job-name=qwen14b-4090
#SBATCH --partition=gpu4090
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=8
#SBATCH --gpus-per-node=8
#SBATCH --cpus-per-task=8
#SBATCH --mem=0
#SBATCH --time=24:00:00
#SBATCH --signal=B:USR1@600
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
DECK=${1:-$QWENFT_SHARE/inputs/4090.cfg}
[ $# -gt 0 ] && shift
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
echo "qwen-ft job ${SLURM_JOB_ID} (restart ${SLURM_RESTART_COUNT:-0}) on ${SLURM_JOB_NODELIST}: qwen-ft train ${DECK} $*"
not_yet
srun --mpi=pmix --nodes=1 --ntasks-per-node=8 --gpus-per-node=8 --gpu-bind=none \
     --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}" qwen-ft train "$DECK" "$@" &
srun_pid=$!
rc=0; wait_step "$srun_pid" || rc=$?
if [ "$stop" = USR1 ] && [ "$rc" -eq 0 ]; then
  echo "qwen-ft job: checkpoint written; requeueing job ${SLURM_JOB_ID} to resume"
  scontrol requeue "${SLURM_JOB_ID}"
fi
exit "$rc"
