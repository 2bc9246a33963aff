#!/usr/bin/env bash
# Every shipped Slurm script (slurm/*.sh): shellcheck clean; `sbatch --test-only` accepts it on the test cluster,
# whose partitions are shaped like the scripts' targets (.ci/system-setup.sh: gpu4090 = 1 node of 8 GPUs, a100 =
# 1 node of 4, h200 = 4 nodes of 8, cpu). --test-only makes slurmctld parse the #SBATCH lines and check that the
# partition can ever satisfy them (nodes, tasks, CPUs per task, GPUs per node, memory, time, array, signal), without
# running anything; shown by asking for shapes the cluster lacks, which must be refused. And each script carries the
# conventions docs/hpc.md promises: srun --mpi=pmix, --gpus-per-node with --gpu-bind=none, one task per GPU,
# --signal=B:USR1@<lead> with --requeue, module load qwen-ft, and the training scripts' shared signal/requeue code
# (slurm/qwen-ft-job.sh, sourced from $QWENFT_SHARE/slurm after module load), whose behaviour is checked here too:
# a stand-in job around it, with a stand-in scontrol and a bash step, gets SIGUSR1/SIGTERM at each stage (and once
# as its step starts, with QWENFT_SIGNAL_GRACE = 2 s: forwarded when the step is that old).
. "$SRC/tests/system_common.sh"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
command -v shellcheck > /dev/null || skip "no shellcheck: run 'bash .ci/system-setup.sh' as root"
lib=$SRC/slurm/qwen-ft-job.sh
scripts=()
for s in "$SRC"/slurm/*.sh; do [ "$s" = "$lib" ] || scripts+=("$s"); done
[ ${#scripts[@]} -ge 6 ] || fail "expected at least 6 scripts in slurm/, found ${#scripts[@]}"
# each script alone (as a site copies one), and -x: following qwen-ft-job.sh (its source directive)
for s in "${scripts[@]}" "$lib" "$SRC/.ci/system-setup.sh"; do
  { shellcheck "$s" && shellcheck -x "$s"; } > sc.out 2>&1 || { fail "shellcheck $(basename "$s")"; cat sc.out; }
done
echo "shellcheck: ${#scripts[@]} slurm scripts, qwen-ft-job.sh and .ci/system-setup.sh clean"

# conventions (static)
for s in "${scripts[@]}"; do
  b=$(basename "$s")
  grep -q '^module load qwen-ft' "$s" || fail "$b: no 'module load qwen-ft'"
  grep -q 'srun --mpi=pmix' "$s" || fail "$b: no 'srun --mpi=pmix'"
  case "$b" in prepare.sh) continue ;; esac
  grep -q '^#SBATCH --signal=B:USR1@[0-9]' "$s" || fail "$b: no '#SBATCH --signal=B:USR1@<lead>'"
  grep -q '^#SBATCH --requeue' "$s" || fail "$b: no '#SBATCH --requeue'"
  # signals held from the first command on; after module load, qwen-ft-job.sh; not_yet; srun ... &; finish_step
  body=$(grep -v '^#' "$s" | grep -v '^$')
  case "$(sed -n 2p <<< "$body")" in "unset stop; trap 'stop=USR1' USR1; trap 'stop=TERM' TERM"*) ;;
    *) fail "$b: the signals are not held from the start (the first command after set -eo pipefail)" ;; esac
  # shellcheck disable=SC2016  # the script's own text: \$QWENFT_SHARE as written there
  grep -A1 '^module load qwen-ft$' <<< "$body" | grep -q '^\. "${QWENFT_SHARE:?.*}/slurm/qwen-ft-job.sh"$' ||
    fail "$b: does not source \$QWENFT_SHARE/slurm/qwen-ft-job.sh right after module load qwen-ft"
  grep -q '^not_yet$' "$s" || fail "$b: no not_yet before the training step"
  grep -B1 '^finish_step "\$!"$' "$s" | grep -q ' &$' || fail "$b: the training step is not 'srun ... &' + finish_step \"\$!\""
  case "$b" in demo_cpu.sh) continue ;; esac
  tpn=$(sed -n 's/^#SBATCH --ntasks-per-node=\([0-9]*\).*/\1/p' "$s")
  gpn=$(sed -n 's/^#SBATCH --gpus-per-node=\([0-9]*\).*/\1/p' "$s")
  [ -n "$gpn" ] && [ "$tpn" = "$gpn" ] || fail "$b: not one task per GPU (ntasks-per-node $tpn, gpus-per-node $gpn)"
  grep -q -- "--gpus-per-node=$gpn --gpu-bind=none" "$s" || fail "$b: srun does not keep every GPU visible (--gpus-per-node=$gpn --gpu-bind=none)"
done

grep -q "^trap 'forward USR1' USR1" "$lib" || fail "qwen-ft-job.sh: no trap forwarding SIGUSR1 to the step"
grep -q 'scontrol requeue' "$lib" || fail "qwen-ft-job.sh: does not requeue the job"

# qwen-ft-job.sh's behaviour: a job around it (as the scripts use it), a stand-in scontrol that logs, a bash step
# that stops on the signal with exit STEPRC (as the ranks do: 0 after their checkpoint); the signal comes while the
# step trains, while the job prepares (before not_yet), or before the library is sourced (during module load)
d=$WORK/lib
mkdir -p "$d/bin"
printf '#!/bin/sh\necho "scontrol $*" >> "%s/scontrol.log"\n' "$d" > "$d/bin/scontrol"
chmod +x "$d/bin/scontrol"
cat > "$d/job.sh" <<'JOB'
#!/bin/bash
set -eo pipefail
unset stop; trap 'stop=USR1' USR1; trap 'stop=TERM' TERM
if [ "$WHEN" = early ]; then : > ready; while [ ! -e go ]; do sleep 0.02; done; fi
. "$LIB"
if [ "$WHEN" = prepare ]; then : > ready; while [ ! -e go ]; do sleep 0.02; done; fi
not_yet
if [ "$WHEN" = none ]; then bash -c 'exit "$STEPRC"' &
else bash -c 'trap "echo step: stopped; exit \$STEPRC" USR1 TERM; : > ready; while :; do sleep 0.02; done' & fi
finish_step "$!"
JOB
# GRACE: QWENFT_SIGNAL_GRACE, the age a step must reach before a signal is forwarded to it (0: at once; the last
# train case keeps 2 s, so its signal, sent as the step starts, waits and says so)
for c in "USR1 train 0 0" "TERM train 0 0" "USR1 train 3 0" "TERM train 143 0" "USR1 prepare 0 0" "TERM prepare 0 0" \
         "USR1 early 0 0" "none none 0 0" "none none 5 0" "USR1 train 0 2"; do
  read -r sig when steprc grace <<< "$c"
  (cd "$d" && rm -f ready go scontrol.log out
   PATH=$d/bin:$PATH SLURM_JOB_ID=42 LIB=$lib WHEN=$when STEPRC=$steprc QWENFT_SIGNAL_GRACE=$grace bash job.sh \
     > out 2>&1 & pid=$!
   if [ "$sig" != none ]; then
     for _ in $(seq 1 500); do [ -e ready ] && break; sleep 0.02; done
     kill -s "$sig" "$pid"; : > go
   fi
   rc=0; wait "$pid" || rc=$?
   echo "$sig $when $steprc -> exit $rc: $(sed -e 's/ at [0-9:]*:/ at T:/' \
     -e 's/started [0-9]* s ago: forwarding in [0-9]* s/started S s ago: forwarding in W s/' out | tr '\n' '|') $(cat scontrol.log 2> /dev/null)")
done > lib.out
R='qwen-ft job: SIGUSR1 received at T: asking the ranks to checkpoint and stop|'
T='qwen-ft job: SIGTERM received at T: asking the ranks to checkpoint and stop|'
Q='qwen-ft job: checkpoint written; requeueing job 42 to resume|'
cat > lib.want <<WANT
USR1 train 0 -> exit 0: ${R}step: stopped|$Q scontrol requeue 42
TERM train 0 -> exit 0: ${T}step: stopped| 
USR1 train 3 -> exit 3: ${R}step: stopped| 
TERM train 143 -> exit 143: ${T}step: stopped| 
USR1 prepare 0 -> exit 0: ${R}qwen-ft job: SIGUSR1 before training started| scontrol requeue 42
TERM prepare 0 -> exit 0: ${T}qwen-ft job: SIGTERM before training started| 
USR1 early 0 -> exit 0: ${R}qwen-ft job: SIGUSR1 before training started| scontrol requeue 42
none none 0 -> exit 0:  
none none 5 -> exit 5:  
USR1 train 0 -> exit 0: ${R}qwen-ft job: the step started S s ago: forwarding in W s|step: stopped|$Q scontrol requeue 42
WANT
if diff lib.want lib.out > lib.diff; then
  echo "qwen-ft-job.sh: forwards, requeues after a SIGUSR1 checkpoint, exits as the step, in all $(wc -l < lib.out) cases"
else
  fail "qwen-ft-job.sh's behaviour (want < > got)"; cat lib.diff
fi

# sbatch --test-only: accepted as shipped (each names its partition) ...
need_slurm
# a cluster without several slurmd per machine (QWENFT_CI_MULTI_SLURMD=no) has one node per partition
h200_nodes=$(sinfo -h -p h200 -o %D 2> /dev/null | head -1)
for s in "${scripts[@]}"; do
  b=$(basename "$s")
  extra=()
  if [ "$b" = multinode.sh ] && [ "${h200_nodes:-0}" -lt 4 ]; then
    extra=(--nodes="$h200_nodes"); echo "note: partition h200 has $h200_nodes node(s); multinode.sh tried with --nodes=$h200_nodes"
  fi
  if sbatch --test-only "${extra[@]}" "$s" > t.out 2>&1 && grep -q "to start at" t.out; then
    echo "$b: $(sed -n 's/.*\(using .*\)/\1/p' t.out)"
  else
    fail "$b: sbatch --test-only"; cat t.out
  fi
done
# ... and refused where the shape does not exist (proving that --test-only checks it)
refuse() { if sbatch --test-only "$@" > t.out 2>&1; then fail "sbatch --test-only $* was accepted"; else echo "refused as it must be: $* ($(tail -1 t.out))"; fi; }
[ "$(sinfo -h -p a100 -o %G | head -1)" != gpu:4 ] || refuse -p a100 "$SRC/slurm/qwen14b_8x4090.sh"
refuse --nodes=$((h200_nodes + 1)) "$SRC/slurm/multinode.sh"
refuse --gpus-per-node=9 "$SRC/slurm/qwen14b_8x4090.sh"
[ "$fails" -eq 0 ] && echo "PASS" || { echo "FAIL: $fails"; exit 1; }
