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
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
DEMO=$QWENFT_SHARE/inputs
mkdir -p demo-out
for part in train valid; do
  if [ ! -s "demo-out/$part.h5" ]; then
    srun --mpi=pmix --ntasks=1 qwen-ft prepare --in "$DEMO/demo/$part.jsonl" --out "demo-out/$part.h5" \
         --vocab-size 320 --eos-id 256 --pad-id 256
  fi
done
echo "qwen-ft job ${SLURM_JOB_ID} (restart ${SLURM_RESTART_COUNT:-0}): qwen-ft train $DEMO/demo.cfg $*"
not_yet
srun --mpi=pmix --ntasks="${SLURM_NTASKS:-2}" qwen-ft train "$DEMO/demo.cfg" "$@" &
srun_pid=$!
rc=0; wait_step "$srun_pid" || rc=$?
if [ "$stop" = USR1 ] && [ "$rc" -eq 0 ]; then
  echo "qwen-ft job: checkpoint written; requeueing job ${SLURM_JOB_ID} to resume"
  scontrol requeue "${SLURM_JOB_ID}"
fi
exit "$rc"
