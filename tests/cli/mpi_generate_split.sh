#!/usr/bin/env bash
# generate with the decoder layers split across CPU ranks (src/generate/decode.c): a model trained for 5 steps (3 layers,
# Qwen3 q/k-norm, GQA, tied embeddings: the last rank holds the embedding again for the head) generates a batch of
# prompts of different lengths on 1, 2 and 3 ranks (splits 3 | 1+2 | 1+1+1) with the same ids, greedy and sampled
# (temperature, top-k, top-p, repetition penalty, seed); 4 ranks for 3 layers is exit 2 naming the split; the HF
# fixtures on 2 ranks equal transformers' greedy; `qwen-ft estimate` states the generate mode for the device size.
# Env: QWENFT, WORK, SRC (tests/mpi_common.sh).
source "$SRC/tests/mpi_common.sh"
run base 1 || exit 1
printf '%s\n' '{"prompt_ids": [5, 17, 200, 3]}' '{"prompt_ids": [42]}' '{"prompt_ids": [7, 7, 7, 3, 90, 11, 2, 64, 300, 1, 8]}' > p.jsonl
gen() { # NP OUT ARGS...: generate on NP ranks into OUT
  local np=$1 out=$2; shift 2
  if ! timeout 120 "$MPIRUN" -np "$np" "$QWENFT" generate --model base/ck --prompts p.jsonl --max-new-tokens 12 --json "$@" > "$out" 2> "$out.err"; then
    echo "FAIL: generate on $np ranks $*:"; cat "$out.err"; exit 1
  fi
}
for mode in greedy sampled; do
  args=(); [ $mode = sampled ] && args=(--temperature 0.8 --top-k 40 --top-p 0.9 --repetition-penalty 1.3 --seed 11)
  gen 1 $mode.1 "${args[@]}"
  [ "$(wc -l < $mode.1)" -eq 3 ] || { echo "FAIL: $mode: expected 3 output lines"; cat $mode.1; exit 1; }
  for np in 2 3; do
    gen $np $mode.$np "${args[@]}"
    cmp -s $mode.1 $mode.$np || { echo "FAIL: $mode on $np ranks differs from 1 rank:"; diff $mode.1 $mode.$np; exit 1; }
  done
  # the layers streamed from host memory through two device slots (src/generate/decode_units.c): the same ids
  for np in 1 2 3; do
    gen $np $mode.s$np "${args[@]}" --stream-weights
    cmp -s $mode.1 $mode.s$np || { echo "FAIL: $mode --stream-weights on $np ranks differs:"; diff $mode.1 $mode.s$np; exit 1; }
  done
  gen 2 $mode.auto "${args[@]}" --gpu-memory-limit-gb 1e-7
  grep -q "stream from host memory" $mode.auto.err && cmp -s $mode.1 $mode.auto || { echo "FAIL: $mode: a tiny --gpu-memory-limit-gb should stream the layers"; cat $mode.auto.err; exit 1; }
  echo "$mode: 3 prompts, 1 rank == 2 ranks == 3 ranks (layer split) == streamed layers on 1, 2, 3 ranks"
done
cmp -s greedy.1 sampled.1 && { echo "FAIL: sampling gave the greedy ids"; exit 1; }
# the HF fixtures (2 layers: one per rank) on 2 ranks give transformers' greedy ids (tests/reference/fixtures)
python3 - "$SRC/tests/reference/fixtures" "$QWENFT" "$MPIRUN" <<'PY'
import json, subprocess, sys
fix, q, mpirun = sys.argv[1:4]
g = json.load(open(f"{fix}/generate.json")); bad = n = 0
for case, runs in g["cases"].items():
    with open(f"{case}.jsonl", "w") as f:
        for r in runs: f.write(json.dumps({"prompt_ids": r["prompt"]}) + "\n")
    out = subprocess.run([mpirun, "-np", "2", q, "generate", "--model", f"{fix}/{case}/hf", "--prompts", f"{case}.jsonl",
                          "--max-new-tokens", str(g["max_new_tokens"]), "--json"], capture_output=True, text=True, timeout=120)
    if out.returncode: print(f"FAIL {case}: exit {out.returncode}\n{out.stderr}"); sys.exit(1)
    got = [json.loads(l)["ids"] for l in out.stdout.splitlines()]
    for r, ids in zip(runs, got):
        n += 1
        if ids != r["ids"]: bad += 1; print(f"FAIL {case} {r['prompt']} on 2 ranks: {ids} != transformers {r['ids']}")
    if len(got) != len(runs): bad += 1; print(f"FAIL {case}: {len(got)} lines for {len(runs)} prompts")
print(f"2 ranks, fixtures batched: {n - bad}/{n} continuations equal transformers' greedy")
sys.exit(1 if bad else 0)
PY
set +e
"$MPIRUN" -np 4 "$QWENFT" generate --model base/ck --prompt-ids 1,2 --max-new-tokens 2 > /dev/null 2> err.txt; rc=$?
set -e
[ $rc -eq 2 ] && grep -q "4 ranks for 3 decoder layers" err.txt || { echo "FAIL: 4 ranks, 3 layers: exit $rc"; cat err.txt; exit 1; }
# qwen-ft estimate says which generate mode applies for the deck's device size
"$QWENFT" estimate deck.cfg --ranks 3 --set gpu_memory_limit_gb=100 > est1.txt
"$QWENFT" estimate deck.cfg --ranks 3 --set gpu_memory_limit_gb=1e-9 > est2.txt
"$QWENFT" estimate deck.cfg --ranks 1 --set model.intermediate_size=4096 --set model.num_hidden_layers=12 --set gpu_memory_limit_gb=0.01 > est3.txt
grep -q "batch  1: .*-> fits one device (1 rank)" est1.txt || { echo "FAIL: estimate, large device:"; cat est1.txt; exit 1; }
grep -q "batch 32: .*-> does not fit 3 ranks" est2.txt || { echo "FAIL: estimate, tiny device:"; cat est2.txt; exit 1; }
grep -q "batch  1: .*-> layers streamed from host memory" est3.txt || { echo "FAIL: estimate, streamed:"; cat est3.txt; exit 1; }
echo "estimate: generate mode stated (fits one device / streamed / does not fit)"
echo PASS
