# shellcheck shell=bash
# qwen-ft-job.sh — sourced by the training scripts of $QWENFT_SHARE/slurm after `module load qwen-ft`; not a job of
# its own. It forwards SIGUSR1/SIGTERM from the batch shell to the training step and requeues the job after a
# time-limit stop (docs/hpc.md, "Signals, wall time, requeue"). A script uses it as
#
#   unset stop; trap 'stop=USR1' USR1; trap 'stop=TERM' TERM   # first: hold a signal that comes before this file
#   ... module load qwen-ft
#   . "$QWENFT_SHARE/slurm/qwen-ft-job.sh"                   # the traps below take over (and replay a held signal)
#   ...                                                       # prepare data, pick the deck
#   not_yet                                                   # a signal so far: say so, requeue on SIGUSR1, exit 0
#   srun --mpi=pmix ... qwen-ft train "$DECK" "$@" &
#   finish_step "$!"                                          # wait; requeue after a SIGUSR1 checkpoint; exit as it
stop=${stop:-}
srun_pid=''
pending=''
step_t0=0
# forward SIG: srun passes the signal on to every task (rank) of the step. A rank holds SIGUSR1/SIGTERM from the
# start of main() until its handlers are in (src/cli/main.c), but a signal that reaches a task still loading the
# program (exec and its shared libraries: seconds on a busy node) kills it with no checkpoint. Slurm may send
# --signal up to 60 s early, even at the job's start (seen: 1 s after it), so a step younger than
# QWENFT_SIGNAL_GRACE seconds (default 10) gets the signal once it is that old.
forward() {
  stop=$1
  echo "qwen-ft job: SIG$1 received at $(date +%T): asking the ranks to checkpoint and stop"
  if [ -n "$srun_pid" ]; then deliver "$1"; else pending=1; fi
}
deliver() { # the signal to the step, once the step is QWENFT_SIGNAL_GRACE seconds old
  local wait_s=$((${QWENFT_SIGNAL_GRACE:-10} - (SECONDS - step_t0)))
  if [ "$wait_s" -gt 0 ]; then
    echo "qwen-ft job: the step started $((SECONDS - step_t0)) s ago: forwarding in $wait_s s"
    sleep "$wait_s"
  fi
  kill -s "$1" "$srun_pid" 2> /dev/null || true
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
# finish_step PID: PID is the training step (`srun ... &`); wait for it; when it stopped cleanly (exit 0: checkpoint
# written) after a SIGUSR1, requeue the job to resume; then exit with the step's status
finish_step() {
  local rc
  step_t0=$SECONDS
  srun_pid=$1
  # a signal since not_yet, before the step's pid was known (pending): deliver it now; one that comes from here on
  # is delivered by its trap (testing $stop instead forwarded a signal twice when it came between these lines)
  if [ -n "$pending" ]; then pending=''; deliver "$stop"; fi
  rc=0; wait_step "$srun_pid" || rc=$?
  if [ "$stop" = USR1 ] && [ "$rc" -eq 0 ]; then
    echo "qwen-ft job: checkpoint written; requeueing job ${SLURM_JOB_ID} to resume"
    scontrol requeue "${SLURM_JOB_ID}"
  fi
  exit "$rc"
}
trap 'forward USR1' USR1
trap 'forward TERM' TERM
# a signal held by the script's first trap, while `module load` ran: as if these traps had been there
if [ -n "$stop" ]; then forward "$stop"; fi
