#!/bin/bash
# qwen14b_8x4090.sh — Qwen-14B full fine-tuning on ONE node of 8 RTX 4090 (24 GB each, PCIe, no P2P, no
# InfiniBand): ZeRO-3 with optimizer and parameter offload to the CPU, fp16 (loss_scale_window 100), seq 512,
# micro batch 16 x accumulation 16 (the deck inputs/4090.cfg).
#
#   sbatch qwen14b_8x4090.sh [DECK.cfg] [--set key=value ...]     (deck default: ./4090.cfg, copied from $QWENFT_SHARE/inputs)
#
# It runs in the directory you submit from; the deck's relative paths (qwen14b.h5, data/, ckpt/, logs/) are relative
# to the deck's directory.
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
if [ $# -gt 0 ]; then DECK=$1; shift; else DECK=4090.cfg; [ -e "$DECK" ] || cp "$QWENFT_SHARE/inputs/4090.cfg" "$DECK"; fi
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
echo "qwen-ft job ${SLURM_JOB_ID} (restart ${SLURM_RESTART_COUNT:-0}) on ${SLURM_JOB_NODELIST}: qwen-ft train ${DECK} $*"
not_yet
srun --mpi=pmix --nodes=1 --ntasks-per-node=8 --gpus-per-node=8 --gpu-bind=none \
     --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}" qwen-ft train "$DECK" "$@" &
finish_step "$!"
