#!/usr/bin/env bash
# The issue's "done when", as a new user would do it on the test cluster (.ci/system-setup.sh):
#   cmake --install; module load qwen-ft; sbatch $QWENFT_SHARE/slurm/demo_cpu.sh -> trains to completion (exit 0);
#   a second demo job, `scancel --signal=USR1` mid-run -> checkpoint, exit 0 (job COMPLETED, ExitCode 0:0);
#   the next job resumes where it stopped ("resuming at step N") and the metrics continue without a gap.
. "$SRC/tests/system_common.sh"
slurm_with_module
[ "$(command -v qwen-ft)" = "$WORK/prefix/bin/qwen-ft" ] || { echo "FAIL: module load qwen-ft: qwen-ft is $(command -v qwen-ft)"; exit 1; }
JOB=$QWENFT_SHARE/slurm/demo_cpu.sh
fails=0

# 1. the demo trains to completion
mkdir -p a && cd a
t0=$(date +%s)
rc=0
sbatch --wait --output=demo.out "$JOB" > sbatch.out || rc=$?
jid=$(sed -n 's/Submitted batch job //p' sbatch.out)
echo "1. demo job $jid: exit $rc after $(($(date +%s) - t0)) s"
if [ "$rc" -ne 0 ] || ! grep -q "^done: 150 steps" demo.out; then
  echo "FAIL: the demo job did not finish"; tail -20 demo.out; fails=$((fails + 1))
fi
grep -q "launcher: Slurm job $jid" demo.out || { echo "FAIL: the run header does not name the Slurm job"; fails=$((fails + 1)); }
[ "$(cat demo-out/ckpt/latest 2> /dev/null)" = step-00000150.h5 ] || { echo "FAIL: no final checkpoint"; fails=$((fails + 1)); }
cd ..

# 2. scancel --signal=USR1 mid-run: checkpoint and exit 0 (scancel signals the job's steps: the ranks get it)
mkdir -p b && cd b
SETS=(--set max_steps=3000 --set scheduler.params.total_num_steps=3000 --set checkpoint.every_steps=1000)
jid=$(sbatch --parsable --output=demo1.out "$JOB" "${SETS[@]}")
for _ in $(seq 1 900); do
  n=$(grep -c '"loss"' demo-out/logs/metrics.jsonl 2> /dev/null || true)
  [ "${n:-0}" -ge 20 ] && break
  sleep 0.2
done
[ "${n:-0}" -ge 20 ] || { echo "FAIL: job $jid did not start training"; cat demo1.out; scancel "$jid"; exit 1; }
scancel --signal=USR1 "$jid"
wait_job "$jid" 300 || { echo "FAIL: job $jid still running 300 s after SIGUSR1"; scancel "$jid"; exit 1; }
state=$(job_state "$jid") code=$(job_exit "$jid")
stopped=$(sed -n 's/^stopped: checkpoint at step \([0-9]*\) of.*/\1/p' demo1.out)
echo "2. job $jid: SIGUSR1 after $n steps -> $state, ExitCode $code; $(grep -m1 '^stopping at' demo1.out || echo 'no stop line')"
if [ "$state" != COMPLETED ] || [ "$code" != 0:0 ] || [ -z "$stopped" ]; then
  echo "FAIL: the signal stop did not end the job cleanly"; tail -20 demo1.out; fails=$((fails + 1))
fi
[ -z "$stopped" ] || [ "$(cat demo-out/ckpt/latest)" = "step-$(printf %08d "$stopped").h5" ] ||
  { echo "FAIL: latest is $(cat demo-out/ckpt/latest), expected step $stopped"; fails=$((fails + 1)); }

# 3. the next job resumes there and runs 10 more steps
if [ -n "$stopped" ]; then
  rc=0
  sbatch --wait --output=demo2.out "$JOB" "${SETS[@]}" --set max_steps=$((stopped + 10)) > /dev/null || rc=$?
  grep -q "^resuming at step $stopped " demo2.out || { echo "FAIL: no 'resuming at step $stopped'"; tail demo2.out; fails=$((fails + 1)); }
  grep -q "^done: $((stopped + 10)) steps" demo2.out || { echo "FAIL: the resumed job did not finish (exit $rc)"; fails=$((fails + 1)); }
  python3 - demo-out/logs/metrics.jsonl $((stopped + 10)) <<'PY' || fails=$((fails + 1))
import json, sys
steps = [json.loads(l)["step"] for l in open(sys.argv[1]) if '"loss"' in l]
ok = steps == list(range(1, int(sys.argv[2]) + 1))
print(f"3. resumed: metrics.jsonl holds steps 1..{sys.argv[2]} once each: {ok}")
sys.exit(0 if ok else 1)
PY
fi
[ "$fails" -eq 0 ] && echo "PASS" || { echo "FAIL: $fails"; exit 1; }
