#!/bin/bash
# prepare.sh — a CPU job that packs JSONL into the HDF5 datasets training reads (`qwen-ft prepare`); no GPU.
#
#   sbatch prepare.sh --in 'data/*.jsonl.zst' --out data/train.h5 --valid-fraction 0.02 [--tokenizer T] [...]
#
# All arguments go to `qwen-ft prepare` (qwen-ft prepare --help). It runs in the directory you submit from.
# One rank per core: every rank tokenizes 1/N of the input bytes and all write one dataset together (the same
# dataset as one rank writes; docs/formats.md, "At scale"). sbatch --ntasks=N changes N.
#SBATCH --job-name=qwen-ft-prepare
#SBATCH --partition=cpu
#SBATCH --nodes=1
#SBATCH --ntasks=16
#SBATCH --cpus-per-task=1
#SBATCH --mem=64G
#SBATCH --time=04:00:00
#SBATCH --output=%x-%j.out
set -eo pipefail

# ---- environment: `module` (the batch shell may not have inherited it), qwen-ft ------------------------------
# shellcheck source=/dev/null
command -v module > /dev/null 2>&1 || for init in /usr/share/lmod/lmod/init/bash /etc/profile.d/{lmod,modules}.sh; do
  if [ -r "$init" ]; then . "$init"; break; fi; done
module load qwen-ft
if [ $# -eq 0 ]; then
  echo "usage: sbatch prepare.sh --in F.jsonl --out D.h5 [qwen-ft prepare options]" >&2
  exit 2
fi
export OMP_NUM_THREADS=1
srun --mpi=pmix qwen-ft prepare "$@"
