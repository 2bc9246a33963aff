#!/bin/bash
# sweep_lr.sh — a job array: one training per learning rate, each on its own 4 x A100 node, each with its own
# checkpoint and log directories (so that each array task resumes on its own after a requeue).
#
#   sbatch sweep_lr.sh [DECK.cfg] [--set key=value ...]          (deck default: ./a100.cfg, copied from $QWENFT_SHARE/inputs)
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

unset stop; trap 'stop=USR1' USR1; trap 'stop=TERM' TERM # held from the start; qwen-ft-job.sh forwards them

LRS=(5e-6 1e-5 2e-5 5e-5)
# ---- environment: `module` (a batch shell may lack it), qwen-ft, and qwen-ft-job.sh (signals, requeue) -------
# shellcheck source=/dev/null
command -v module > /dev/null 2>&1 || for init in /usr/share/lmod/lmod/init/bash /etc/profile.d/{lmod,modules}.sh; do
  if [ -r "$init" ]; then . "$init"; break; fi; done
module load qwen-ft
# shellcheck source-path=SCRIPTDIR source=qwen-ft-job.sh disable=SC1091
. "${QWENFT_SHARE:?module load qwen-ft did not set QWENFT_SHARE}/slurm/qwen-ft-job.sh"
# the deck's relative paths are its directory's: without a DECK argument, a copy of the shipped one in the
# directory you submit from (made once; edit it there)
if [ $# -gt 0 ]; then DECK=$1; shift; else DECK=a100.cfg; [ -e "$DECK" ] || cp "$QWENFT_SHARE/inputs/a100.cfg" "$DECK"; fi
LR=${LRS[${SLURM_ARRAY_TASK_ID:-0}]}
OUT=sweep/lr-${LR}
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
echo "qwen-ft sweep task ${SLURM_ARRAY_TASK_ID:-0} (job ${SLURM_JOB_ID}, restart ${SLURM_RESTART_COUNT:-0}): lr ${LR} -> ${OUT}"
not_yet
srun --mpi=pmix --nodes=1 --ntasks-per-node=4 --gpus-per-node=4 --gpu-bind=none \
     --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}" qwen-ft train "$DECK" \
     --set optimizer.params.lr="$LR" --set scheduler.params.warmup_max_lr="$LR" \
     --set checkpoint.dir="$OUT/ckpt" --set log.dir="$OUT/logs" "$@" &
finish_step "$!"
