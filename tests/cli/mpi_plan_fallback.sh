#!/usr/bin/env bash
# A layout plan that runs out of memory in the engine's set-up after all (docs/zero.md "When a plan does not fit
# after all"), on 2 CPU ranks, made to by the test hook QWENFT_INJECT_FAULT="RANK:K:oom" (docs/testing.md: the first
# K layouts tried are refused memory past half of what they are predicted to take on that rank):
#  (a) an "auto" deck whose first two plans run out on the last rank only falls back twice by itself, says so on stderr and
#      in the run header, which shows the plan that ran; it gives the same per-step losses, gradient norms and final
#      master weights and Adam moments, bit for bit, as the same deck with that plan's keys set by hand, and the
#      engine's count of its model state is the hand run's (nothing of the failed set-ups stayed);
#  (b) a hand-set layout that runs out keeps exit 3 and today's message (no fallback);
#  (c) when every plan tried runs out, exit 3 naming each plan tried and where it ran out;
#  (d) on one rank, a plan whose first step runs out of memory (QWENFT_INJECT_FAULT="0:K:oomstep": an allocation
#      failing after the first micro-batch) falls back by itself as in (a): the run starts again with the next plan
#      that needs less device memory and gives the hand-set run of that plan bit for bit;
#  (e) the same on several ranks: the rank that ran out finishes its first step in rescue memory (it cannot leave a
#      collective the others are in), the ranks agree after the step, and the run falls back as in (d);
#  (f) when every plan's first step runs out (one rank; every rank of NP), exit 3 naming each plan tried.
# tests/cli/gpu_plan_fallback.sh runs the same on GPUs (PLAN_FALLBACK_NP ranks; PLAN_FALLBACK_TOL: the losses'
# tolerance against the hand-set run, 0 = bit for bit, with the gradient norms and the final optimizer state too).
. "$SRC/tests/mpi_common.sh"
NP=${PLAN_FALLBACK_NP:-2}
LAST=$((NP - 1))
TOL=${PLAN_FALLBACK_TOL:-0}
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# micro batch fixed: the model state dominates, so the plans run out in the ZeRO engine's set-up (gradient shard,
# optimizer state, offload buffers), not only in the activations
auto=(--set zero_optimization.stage='"auto"' --set zero_optimization.offload_optimizer.device='"auto"'
      --set zero_optimization.offload_param.device='"auto"' --set activation_checkpointing='"auto"'
      --set train_micro_batch_size_per_gpu=2)

# fallback NAME RANK K AUTO_KEYS...: (a) the fallback on rank RANK (its first K plans run out; FB_KIND oom, in the
# set-up, or oomstep, in the first step, on FB_NP ranks), and the same run set by hand
fallback() {
  local name=$1 rank=$2 k=$3 np=${FB_NP:-$NP} kind=${FB_KIND:-oom}; shift 3
  QWENFT_INJECT_FAULT=$rank:$k:$kind run "$name" "$np" "$@" || { fails=$((fails + 1)); return; }
  local n at="at"
  [ "$kind" = oom ] || at="in its first step at"
  n=$(grep -c "^qwen-ft: layout plan: .* ran out of .* memory on rank $rank $at .* ([0-9]* bytes requested); falling back to the next plan: " "$name.out" || true)
  [ "$n" -eq "$k" ] || fail "(a) $name: $n fallback lines on stderr, $k expected"
  grep -q "^layout plan (\"auto\"): .* (plan [0-9]* of the ranking, after $k fallbacks\?); predicted" "$name.out" ||
    fail "(a) $name: the run header does not show the plan that ran"
  # the plan that ran, as deck keys: "stage S, offload O, micro M x accum A, recomputation R[ in K of L layers]"
  local hand
  mapfile -t hand < <(python3 - "$name.out" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
falls = re.findall(r'^qwen-ft: layout plan: .*falling back to the next plan: (.*)$', t, re.M)
# the last header: a run whose first step ran out starts again and prints one per attempt
ran = ([None] + list(re.finditer(r'^layout plan \("auto"\): (.*?) \(plan \d+ of the ranking', t, re.M)))[-1]
if not falls or not ran or falls[-1] != ran.group(1):
    sys.exit("the header's plan is not the last fallback's")
m = re.fullmatch(r'stage (\d), offload (none|optimizer|optimizer\+param)( \(ratio [0-9.]+\))?( \(gradients on the host\))?, '
                 r'micro (\d+) x accum (\d+), recomputation (\w+)(?: in (\d+) of \d+ layers)?', ran.group(1))
if not m or m.group(3): sys.exit("cannot read the plan " + ran.group(1))
st, off, _, gh, mb, ga, rec, k = m.groups()
keys = {"zero_optimization.stage": st,
        "zero_optimization.offload_optimizer.device": '"none"' if off == "none" else '"cpu"',
        "zero_optimization.offload_param.device": '"cpu"' if off == "optimizer+param" else '"none"',
        "train_micro_batch_size_per_gpu": mb, "gradient_accumulation_steps": ga,
        "activation_checkpointing": '"%s"' % rec}
if k: keys["recompute_layers"] = k
if gh: keys["zero_optimization.offload_optimizer.gradients"] = '"host"'
for a, b in keys.items(): print("--set"); print(f"{a}={b}")
PY
  ) || fail "(a) $name: the plan that ran cannot be read from the header"
  echo "$name: fell back to ${hand[*]}"
  run "${name}_hand" "$np" "${hand[@]}" || { fails=$((fails + 1)); return; }
  compare "${name}_hand" "$name" "$TOL" || fail "(a) $name: the losses differ from the hand-set run"
  if [ "$TOL" = 0 ]; then
    same_metrics "${name}_hand" "$name" || fails=$((fails + 1))
    same_ckpt "${name}_hand" "$name" || fails=$((fails + 1))
  fi
  # the engine's count of what it holds: the same as a run that never failed
  local a b
  a=$(grep -o 'memory: rank 0 model state peak .* activations [0-9.]* MiB (estimate [0-9.]*)' "${name}_hand.out" || true)
  b=$(grep -o 'memory: rank 0 model state peak .* activations [0-9.]* MiB (estimate [0-9.]*)' "$name.out" || true)
  if [ -z "$a" ] || [ "$a" != "$b" ]; then fail "(a) $name: memory after the fallback: '$b', a fresh run: '$a'"; fi
}
# the micro batch fixed: the model state dominates, and the plans run out in the ZeRO engine's set-up (gradient
# shard, optimizer state, offload buffers); the last rank alone runs out, twice (once on one rank: only the
# offloads need less device memory there)
fallback state "$LAST" $((NP > 1 ? 2 : 1)) "${auto[@]}"
# the micro batch planned too: the first plan runs out in its activations on rank 0, and the next plan's micro
# batch differs (so do its losses in the last bits, from those of the first plan)
fallback acts 0 1 "${auto[@]::${#auto[@]}-2}" --set train_micro_batch_size_per_gpu='"auto"'

# (b) a hand-set layout: no fallback, exit 3 with the engine's own message
rc=0; QWENFT_INJECT_FAULT=$LAST:1:oom timeout 60 "$MPIRUN" -np "$NP" "$QWENFT" train deck.cfg --set checkpoint.dir=b/ck \
  --set log.dir=b/l > b.out 2>&1 || rc=$?
if [ "$rc" -ne 3 ] || ! grep -q "qwen-ft: rank $LAST: .*out of memory allocating [0-9]* bytes of activations" b.out ||
   grep -q 'falling back' b.out; then
  fail "(b) a hand-set layout that runs out: rc $rc"; tail -5 b.out
else echo "(b) hand-set layout: exit 3: $(grep -o 'out of memory allocating [0-9]* bytes of activations' b.out)"; fi
[ ! -s b/l/metrics.jsonl ] || fail "(b) metrics were written"

# (c) every plan runs out: exit 3 naming the plans tried; nothing written
rc=0; QWENFT_INJECT_FAULT=-1:99:oom timeout 60 "$MPIRUN" -np "$NP" "$QWENFT" train deck.cfg --set checkpoint.dir=c/ck \
  --set log.dir=c/l "${auto[@]}" > c.out 2>&1 || rc=$?
python3 - c.out "$rc" <<'PY' || fails=$((fails + 1))
import re, sys
t, rc = open(sys.argv[1]).read(), int(sys.argv[2])
msg = re.search(r'^qwen-ft: layout plan: every plan tried ran out of memory: (.*)$', t, re.M)
falls = re.findall(r'^qwen-ft: layout plan: (.*?) ran out of .*; falling back to the next plan: (.*)$', t, re.M)
tried = [falls[0][0]] + [f[1] for f in falls] if falls else []
ok = rc == 3 and msg and len(tried) >= 2 and all(p + " (" in msg.group(1) for p in tried)
print(f"(c) every plan runs out: exit {rc}, {len(tried)} plans tried and named: {'ok' if ok else 'FAIL'}")
if not ok: print(t[-2000:])
sys.exit(0 if ok else 1)
PY
if [ -s c/l/metrics.jsonl ] || ls c/ck/step-* > /dev/null 2>&1; then fail "(c) metrics or checkpoints were written"; fi

# (d) the first step runs out on one rank: the run starts again with the next plan, by itself (once, then twice)
# (the micro batch planned: on CPU ranks the ranking follows the measured rates, and at a fixed micro batch the
# first plan may already be the one that needs the least device memory, leaving nothing to fall back to)
FB_NP=1 FB_KIND=oomstep fallback step1 0 1 "${auto[@]::${#auto[@]}-2}" --set train_micro_batch_size_per_gpu='"auto"'
FB_NP=1 FB_KIND=oomstep fallback step2 0 2 "${auto[@]::${#auto[@]}-2}" --set train_micro_batch_size_per_gpu='"auto"'

# (e) on several ranks the rank that ran out finishes its first step in rescue memory, the ranks agree after it,
# and the run starts again with the next plan: the same as (d), bit for bit the hand-set run
if [ "$NP" -gt 1 ]; then
  FB_KIND=oomstep fallback stepn "$LAST" 1 "${auto[@]::${#auto[@]}-2}" --set train_micro_batch_size_per_gpu='"auto"'
fi

# (f) every plan's first step runs out (one rank, and every rank of NP): exit 3 naming the plans tried
for np in 1 $((NP > 1 ? NP : 0)); do
  [ "$np" -gt 0 ] || continue
  rc=0; QWENFT_INJECT_FAULT=-1:99:oomstep timeout 60 "$MPIRUN" -np "$np" "$QWENFT" train deck.cfg \
    --set checkpoint.dir=f$np/ck --set log.dir=f$np/l "${auto[@]}" > f$np.out 2>&1 || rc=$?
  python3 - f$np.out "$rc" "$np" <<'PY' || fails=$((fails + 1))
import re, sys
t, rc = open(sys.argv[1]).read(), int(sys.argv[2])
msg = re.search(r'^qwen-ft: layout plan: every plan tried ran out of memory: (.*)$', t, re.M)
# every attempt's run header names its plan; each must be in the message (how many depends on the ranking)
tried = re.findall(r'^layout plan \("auto"\): (.*?)(?: \(plan \d+ of the ranking.*?\))?; predicted', t, re.M)
falls = re.findall(r'^qwen-ft: layout plan: (.*?) ran out of .* in its first step at .*; falling back to the next plan: (.*)$', t, re.M)
chained = all(f[1] == tried[i + 1] for i, f in enumerate(falls)) and len(falls) == len(tried) - 1
ok = rc == 3 and msg and tried and chained and all(p + " (device memory in the first step at " in msg.group(1) for p in tried)
print(f"(f) {sys.argv[3]} rank(s), every plan's first step runs out: exit {rc}, {len(tried)} plans tried and named: {'ok' if ok else 'FAIL'}")
if not ok: print(t[-2000:])
sys.exit(0 if ok else 1)
PY
  if [ -s f$np/l/metrics.jsonl ] || ls f$np/ck/step-* > /dev/null 2>&1; then fail "(f) $np: metrics or checkpoints were written"; fi
done

if [ "$fails" -ne 0 ]; then echo "FAIL: $fails"; exit 1; fi
echo "PASS"
