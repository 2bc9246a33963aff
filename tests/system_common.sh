# shellcheck shell=bash
# tests/system_common.sh — sourced by tests/cli/system_*.sh: skip (exit 77, saying why) when the single-node test
# cluster of .ci/system-setup.sh (Slurm + munge, Lmod) is not there; a fresh $WORK; installing the build.
set -eo pipefail
skip() { echo "SKIP: $*"; exit 77; }
need_slurm() {
  command -v sbatch > /dev/null || skip "no sbatch (Slurm): run 'bash .ci/system-setup.sh' as root first"
  scontrol ping 2> /dev/null | grep -q UP || skip "slurmctld does not answer 'scontrol ping': run 'bash .ci/system-setup.sh' as root"
  sinfo -h -p cpu -o %a 2> /dev/null | grep -q up || skip "no 'cpu' partition up (the test cluster of .ci/system-setup.sh)"
}
need_lmod() {
  LMOD_INIT=
  for f in /usr/share/lmod/lmod/init/bash ${LMOD_PKG:+"$LMOD_PKG/init/bash"}; do
    if [ -r "$f" ]; then LMOD_INIT=$f; break; fi
  done
  [ -n "$LMOD_INIT" ] || skip "no Lmod (/usr/share/lmod/lmod/init/bash): run 'bash .ci/system-setup.sh' as root"
}
# lmod: defines `module` in this shell
lmod() {
  # shellcheck source=/dev/null
  . "$LMOD_INIT"
}
# install_build: cmake --install $BUILD into $WORK/prefix, as a user would
install_build() {
  cmake --install "$BUILD" --prefix "$WORK/prefix" > "$WORK/install.log" 2>&1 ||
    { cat "$WORK/install.log"; echo "FAIL: cmake --install $BUILD --prefix $WORK/prefix"; exit 1; }
}
# slurm_with_module: the Slurm jobs' prologue: Slurm and Lmod there (or skip), the build installed, its module loaded
slurm_with_module() {
  need_slurm
  need_lmod
  install_build
  lmod
  module use "$WORK/prefix/share/modulefiles"
  module load qwen-ft
}
# job_state JOBID: the job's state (COMPLETED, FAILED, ...) while slurmctld remembers it (MinJobAge)
job_state() { scontrol show job "$1" 2> /dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p'; }
job_exit() { scontrol show job "$1" 2> /dev/null | sed -n 's/.* ExitCode=\([0-9:]*\).*/\1/p'; }
# wait_job JOBID SECONDS: until it has left the queue
wait_job() {
  local s
  for _ in $(seq 1 $(($2 * 5))); do
    s=$(job_state "$1")
    case "$s" in PENDING | RUNNING | CONFIGURING | COMPLETING | REQUEUED | SUSPENDED | "") ;; *) return 0 ;; esac
    [ -n "$s" ] || return 0
    sleep 0.2
  done
  return 1
}
rm -rf "$WORK"
mkdir -p "$WORK"
cd "$WORK"
export OMP_NUM_THREADS=1
