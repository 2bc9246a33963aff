#!/usr/bin/env bash
# Wall time under Slurm, end to end: a demo job with --time=3 --signal=B:USR1@150 gets SIGUSR1 in its batch shell
# 30 to 60 s after it started (Slurm checks every 30 s), long before its limit; the script forwards it to the training step (the ranks checkpoint at the next step
# boundary and exit 0) and requeues the job (scontrol requeue); the requeued job (Restarts=1) resumes from that
# checkpoint. Slurm holds a requeued job until its previous credential has expired (AuthInfo cred_expire, 120 s by
# default; the test cluster of .ci/system-setup.sh sets 10 s). Starting it earlier by hand (scontrol update
# StartTime=now) makes slurmd refuse the revoked credential and the job FAIL, so the test only waits.
. "$SRC/tests/system_common.sh"
slurm_with_module
jid=$(sbatch --parsable --time=3 --signal=B:USR1@150 --output=job.out "$QWENFT_SHARE/slurm/demo_cpu.sh" \
  --set max_steps=20000 --set scheduler.params.total_num_steps=20000 --set checkpoint.every_steps=5000 \
  --set log.steps_per_print=100)
cleanup() { scancel "$jid" 2> /dev/null || true; }
trap cleanup EXIT
for _ in $(seq 1 1000); do grep -q "requeueing job $jid" job.out 2> /dev/null && break; sleep 0.2; done
grep -q "requeueing job $jid" job.out || { echo "FAIL: no requeue within 200 s"; cat job.out; exit 1; }
n=$(sed -n 's/^stopped: checkpoint at step \([0-9]*\) of.*/\1/p' job.out | head -1)
echo "1. $(grep -m1 'SIGUSR1 received at' job.out); stopped at step $n; $(grep -m1 'requeueing' job.out)"
[ -n "$n" ] || { echo "FAIL: no checkpoint before the requeue"; exit 1; }
for _ in $(seq 1 1000); do grep -q "^resuming at step" job.out && break; sleep 0.2; done
grep -q "^qwen-ft job $jid (restart 1)" job.out || { echo "FAIL: the job did not restart"; tail job.out; exit 1; }
grep -q "^resuming at step $n " job.out || { echo "FAIL: the restart did not resume at step $n"; grep resuming job.out; exit 1; }
echo "2. restart 1: $(grep -m1 '^resuming at step' job.out)"
for _ in $(seq 1 300); do [ "$(grep -c '"loss"' demo-out/logs/metrics.jsonl)" -ge $((n + 20)) ] && break; sleep 0.2; done
scancel "$jid"
wait_job "$jid" 120 || true
python3 - demo-out/logs/metrics.jsonl "$n" <<'PY'
import json, sys
steps = [json.loads(l)["step"] for l in open(sys.argv[1]) if '"loss"' in l]
ok = steps == list(range(1, len(steps) + 1)) and len(steps) > int(sys.argv[2])
print(f"3. metrics.jsonl: steps 1..{len(steps)} once each across the requeue: {ok}")
sys.exit(0 if ok else 1)
PY
echo PASS
