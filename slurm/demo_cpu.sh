#!/bin/bash
# demo_cpu.sh — the bundled demo on CPU ranks, as a Slurm job: prepares the byte-level demo data (once) and trains
# the tiny Qwen2-architecture model of inputs/demo.cfg; no GPU needed. The first job to try after installing:
#
#   module load qwen-ft && sbatch $QWENFT_SHARE/slurm/demo_cpu.sh [--set key=value ...]
#
# Output lands in demo-out/ under the directory you submit from (metrics in demo-out/logs, checkpoints in
# demo-out/ckpt). `scancel --signal=USR1 JOBID` stops it with a checkpoint (exit 0); submit again to resume.
# With --time and --signal=B:USR1@<lead> the job stops before its limit and requeues itself.
#SBATCH --job-name=qwen-ft-demo
#SBATCH --partition=cpu
#SBATCH --nodes=1
#SBATCH --ntasks=2
#SBATCH --cpus-per-task=1
#SBATCH --time=00:30:00
#SBATCH --signal=B:USR1@60
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
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
DEMO=$QWENFT_SHARE/inputs
mkdir -p demo-out
for part in train valid; do
  if [ ! -s "demo-out/$part.h5" ]; then
    srun --mpi=pmix --ntasks=1 qwen-ft prepare --in "$DEMO/demo/$part.jsonl" --out "demo-out/$part.h5" \
         --vocab-size 320 --eos-id 256 --pad-id 256
  fi
done
# the deck's paths (../demo-out/...) are relative to its directory: a copy in inputs/ here writes into ./demo-out
mkdir -p inputs
[ -e inputs/demo.cfg ] || cp "$DEMO/demo.cfg" inputs/demo.cfg
echo "qwen-ft job ${SLURM_JOB_ID} (restart ${SLURM_RESTART_COUNT:-0}): qwen-ft train inputs/demo.cfg $*"
not_yet
srun --mpi=pmix --ntasks="${SLURM_NTASKS:-2}" qwen-ft train inputs/demo.cfg "$@" &
finish_step "$!"
