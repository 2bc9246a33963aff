#!/bin/bash
# qwen14b_4xa100.sh — Qwen-14B full fine-tuning on one node of 4 A100-80GB (NVLink): ZeRO-3 without offload,
# bf16, AdamW lr 2e-5 with WarmupDecayLR (warmup 500, 10000 steps), gradient clipping 1.0, activation
# checkpointing (the deck inputs/a100.cfg).
#
#   sbatch qwen14b_4xa100.sh [DECK.cfg] [--set key=value ...]     (deck default: ./a100.cfg, copied from $QWENFT_SHARE/inputs)
#
# It runs in the directory you submit from; the deck's relative paths (qwen14b.h5, data/, ckpt/, logs/) are relative
# to the deck's directory.
# One task (MPI rank) per GPU with all four GPUs visible to every rank (--gpu-bind=none), so that NCCL uses NVLink
# between them. SIGUSR1 ten minutes before the time limit -> checkpoint, exit 0, requeue, resume (docs/hpc.md).
#SBATCH --job-name=qwen14b-a100
#SBATCH --partition=a100
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=8
#SBATCH --mem=0
#SBATCH --time=24:00:00
#SBATCH --signal=B:USR1@600
#SBATCH --requeue
#SBATCH --open-mode=append
#SBATCH --output=%x-%j.out
set -eo pipefail

unset stop; trap 'stop=USR1' USR1; trap 'stop=TERM' TERM # held from the start; qwen-ft-job.sh forwards them

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
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
echo "qwen-ft job ${SLURM_JOB_ID} (restart ${SLURM_RESTART_COUNT:-0}) on ${SLURM_JOB_NODELIST}: qwen-ft train ${DECK} $*"
not_yet
srun --mpi=pmix --nodes=1 --ntasks-per-node=4 --gpus-per-node=4 --gpu-bind=none \
     --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}" qwen-ft train "$DECK" "$@" &
finish_step "$!"
