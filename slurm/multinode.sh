#!/bin/bash
# multinode.sh — template for several nodes of 8 GPUs (H100/H200 with NVLink and InfiniBand): one task per GPU on
# every node, the deck inputs/h200.cfg (ZeRO-3, bf16). Change --nodes (the batch rule: train_batch_size = micro x
# accumulation x all ranks, so the deck gives micro and accumulation and the global batch follows the node count).
#
#   sbatch --nodes=N multinode.sh [DECK.cfg] [--set key=value ...]   (deck default: ./h200.cfg, copied from $QWENFT_SHARE/inputs)
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
if [ $# -gt 0 ]; then DECK=$1; shift; else DECK=h200.cfg; [ -e "$DECK" ] || cp "$QWENFT_SHARE/inputs/h200.cfg" "$DECK"; fi
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
echo "qwen-ft job ${SLURM_JOB_ID} (restart ${SLURM_RESTART_COUNT:-0}) on ${SLURM_JOB_NUM_NODES} nodes (${SLURM_JOB_NODELIST}): qwen-ft train ${DECK} $*"
not_yet
srun --mpi=pmix --nodes="${SLURM_JOB_NUM_NODES}" --ntasks-per-node=8 --gpus-per-node=8 --gpu-bind=none \
     --cpus-per-task="${SLURM_CPUS_PER_TASK:-1}" qwen-ft train "$DECK" "$@" &
finish_step "$!"
