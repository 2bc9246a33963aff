#!/bin/bash
# sweep_lr.sh — a job array: one training per learning rate, each on its own 4 x A100 node, each with its own
# checkpoint and log directories (so that each array task resumes on its own after a requeue).
#
#   sbatch sweep_lr.sh [DECK.cfg] [--set key=value ...]          (deck default: $QWENFT_SHARE/inputs/a100.cfg)
#   qwen-ft plot sweep/lr-*/logs/metrics.jsonl -o sweep.png     (afterwards: the curves side by side)
#
# Array task i trains with LRS[i]; %2 lets at most two run at once. Change LRS and --array together.
#SBATCH --job-name=qwen-ft-sweep
#SBATCH --partition=a100
#SBATCH --array=0-3%2
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=8
#SBATCH --mem=0
#SBATCH --time=12:00:00
#SBATCH --signal=B:USR1@600
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=%x-%A_%a.out
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

LRS=(5e-6 1e-5 2e-5 5e-5)
# ---- environment: the batch shell may not have inherited the `module` function -------------------------------
if ! command -v module > /dev/null 2>&1; then
  for init in /usr/share/lmod/lmod/init/bash /etc/profile.d/lmod.sh /etc/profile.d/modules.sh; do
    # shellcheck source=/dev/null
    if [ -r "$init" ]; then . "$init"; break; fi
  done
fi
module load qwen-ft
DECK=${1:-$QWENFT_SHARE/inputs/a100.cfg}
[ $# -gt 0 ] && shift
LR=${LRS[${SLURM_ARRAY_TASK_ID:-0}]}
OUT=sweep/lr-${LR}
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
echo "qwen-ft sweep task ${SLURM_ARRAY_TASK_ID:-0} (job ${SLURM_JOB_ID}, restart ${SLURM_RESTART_COUNT:-0}): lr ${LR} -> ${OUT}"
not_yet
srun --mpi=pmix --nodes=1 --ntasks-per-node=4 --gpus-per-node=4 --gpu-bind=none \
     --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}" qwen-ft train "$DECK" \
     --set optimizer.params.lr="$LR" --set scheduler.params.warmup_max_lr="$LR" \
     --set checkpoint.dir="$OUT/ckpt" --set log.dir="$OUT/logs" "$@" &
srun_pid=$!
rc=0; wait_step "$srun_pid" || rc=$?
if [ "$stop" = USR1 ] && [ "$rc" -eq 0 ]; then
  echo "qwen-ft job: checkpoint written; requeueing job ${SLURM_JOB_ID} to resume"
  scontrol requeue "${SLURM_JOB_ID}"
fi
exit "$rc"
