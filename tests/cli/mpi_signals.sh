#!/usr/bin/env bash
# Signals and wall time (docs/hpc.md): SIGUSR1, SIGTERM or SIGINT reaching ANY rank (or mpirun, which forwards
# SIGUSR1) -> every rank agrees at the next step boundary -> checkpoint -> exit 0; the next run resumes there and
# the metrics continue without a gap or a repeat. max_hours stops the same way before the limit. A signal that comes
# while MPI starts (before the handlers exist) waits for them instead of killing the rank.
. "$SRC/tests/mpi_common.sh"
fails=0
# start NAME NP ARGS...: trains in the background into NAME/ (max_steps very large); sets $launcher
start() {
  local name=$1 np=$2; shift 2
  "$MPIRUN" -np "$np" "$QWENFT" train deck.cfg --set max_steps=100000 --set checkpoint.dir="$name/ck" \
    --set log.dir="$name/l" "$@" > "$name.out" 2>&1 &
  launcher=$!
}
# steps NAME: optimizer steps logged so far
steps() { local n=0; [ -f "$1/l/metrics.jsonl" ] && n=$(grep -c '"loss"' "$1/l/metrics.jsonl") || true; echo "${n:-0}"; }
wait_steps() { for _ in $(seq 1 600); do [ "$(steps "$1")" -ge "$2" ] && return 0; sleep 0.1; done; return 1; }
rank_pid() { ps -eo pid,ppid,comm | awk -v p="$launcher" '$2==p && $3=="qwen-ft"{print $1}' | sed -n "$1p"; }
# finish NAME SIG: waits for the launcher; checks exit 0, the stop message, latest = the step reached
finish() {
  local name=$1 sig=$2 rc=0
  for _ in $(seq 1 600); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
  wait "$launcher" || rc=$?
  local n; n=$(sed -n 's/^stopping at step \([0-9]*\)\/.*/\1/p' "$name.out")
  if [ "$rc" -ne 0 ] || [ -z "$n" ]; then echo "FAIL: $name: exit $rc, no stop message"; tail -5 "$name.out"; return 1; fi
  grep -q "stopping at step $n/100000: $sig" "$name.out" || { echo "FAIL: $name: reason is not '$sig'"; grep stopping "$name.out"; return 1; }
  grep -q "^stopped: checkpoint at step $n of 100000" "$name.out" || { echo "FAIL: $name: no 'stopped' line"; return 1; }
  [ "$(cat "$name/ck/latest")" = "step-$(printf %08d "$n").h5" ] || { echo "FAIL: $name: latest is $(cat "$name/ck/latest"), not step $n"; return 1; }
  [ "$(steps "$name")" -eq "$n" ] || { echo "FAIL: $name: $(steps "$name") step lines for $n steps"; return 1; }
  grep -q '^done:' "$name.out" && { echo "FAIL: $name: says done"; return 1; }
  echo "$name: $sig -> exit 0, checkpoint at step $n"
  stopped_at=$n
}

# 1. SIGUSR1 to one rank (rank 2 of 3) -> all stop; then resume 3 more steps
start s1 3 --set zero_optimization.stage=3
wait_steps s1 5 || { echo "FAIL: s1 did not start"; tail s1.out; exit 1; }
kill -USR1 "$(rank_pid 3)"
if finish s1 "SIGUSR1 received"; then
  n=$stopped_at
  run s1 2 --set max_steps=$((n + 3)) --set zero_optimization.stage=1 || fails=$((fails + 1))
  grep -q "resuming at step $n " s1.out || { echo "FAIL: s1 resume: no 'resuming at step $n'"; fails=$((fails + 1)); }
  python3 - s1/l/metrics.jsonl $((n + 3)) <<'PY' || fails=$((fails + 1))
import json, sys
steps = [json.loads(l)["step"] for l in open(sys.argv[1]) if '"loss"' in l]
want = list(range(1, int(sys.argv[2]) + 1))
print("s1: metrics steps 1..%d, each once: %s" % (want[-1], steps == want))
sys.exit(0 if steps == want else 1)
PY
else fails=$((fails + 1)); fi

# 2. SIGTERM to rank 0
start s2 2
wait_steps s2 3 || { echo "FAIL: s2 did not start"; exit 1; }
kill -TERM "$(rank_pid 1)"
finish s2 "SIGTERM received" || fails=$((fails + 1))

# 3. SIGINT to rank 1
start s3 2
wait_steps s3 3 || { echo "FAIL: s3 did not start"; exit 1; }
kill -INT "$(rank_pid 2)"
finish s3 "SIGINT received" || fails=$((fails + 1))

# 4. SIGUSR1 to mpirun (it forwards SIGUSR1 to every rank)
start s4 2
wait_steps s4 3 || { echo "FAIL: s4 did not start"; exit 1; }
kill -USR1 "$launcher"
finish s4 "SIGUSR1 received" || fails=$((fails + 1))

# 5. max_hours = 0.0005 (1.8 s): stops by itself with a checkpoint before the limit
t0=$(date +%s.%N)
start s5 2 --set max_hours=0.0005
finish s5 "max_hours = 0.0005 reached" || fails=$((fails + 1))
dt=$(python3 -c "import sys; print(round(float(sys.argv[2]) - float(sys.argv[1]), 1))" "$t0" "$(date +%s.%N)")
echo "s5: the whole mpirun took ${dt} s (max_hours = 1.8 s, counted from the start of train)"
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < 12 else 1)" "$dt" || { echo "FAIL: s5 took too long"; fails=$((fails + 1)); }

# 6. SIGUSR1 as the ranks start (during MPI_Init, before train's handlers exist): held, then handled at step 1
start s6 2
for _ in $(seq 1 1000); do [ -n "$(rank_pid 2)" ] && break; sleep 0.01; done
# A signal before main() runs (while the dynamic loader works) cannot be caught by any program; wait until both
# ranks have blocked SIGUSR1 (bit 10 of SigBlk: qf_signals_hold, before MPI_Init), which is the window under test.
held() { local m; m=$(awk '/^SigBlk/{print $2}' "/proc/$1/status" 2>/dev/null) || return 1; [ -n "$m" ] && (( (16#$m >> 9) & 1 )); }
for _ in $(seq 1 1000); do held "$(rank_pid 1)" && held "$(rank_pid 2)" && break; sleep 0.005; done
kill -USR1 "$(rank_pid 1)" "$(rank_pid 2)"
finish s6 "SIGUSR1 received" || fails=$((fails + 1))

[ "$fails" -eq 0 ] && echo "PASS" || { echo "FAIL: $fails"; exit 1; }
