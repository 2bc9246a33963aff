#!/usr/bin/env bash
# generate on the CUDA tables (src/generate/decode.c through the model's paged mode, as serve's calls):
#   - fp32 table: the HF fixtures' greedy continuations equal transformers' (tests/reference/fixtures/generate.json),
#     one prompt at a time and batched (--prompts), and equal the CPU table's ids;
#   - a batch of text/chat prompts on the widened fixture model (unit_generate_batch.sh's): CUDA fp32 == CPU, ids
#     and text; sampled with a seed: CUDA fp32 == CPU (same logits up to fp32 rounding: compared, mismatches listed);
#   - bf16 and fp16 tables run the same batch (ids in the vocabulary, one line per prompt) and report how many
#     greedy ids agree with fp32 (within bf16 tolerance the continuations may part after a near-tie);
#   - the layers streamed from host memory through two device slots (--stream-weights) == resident, fp32;
#   - bf16, the batch and one prompt (the fused q/k/v and MLP decode kernels): the decoding steps as CUDA graphs
#     (the default) == --cuda-graphs off, and each step queued ahead of reading the previous one's picks (the
#     default) == --decode-ahead off;
#   - with 2 or more GPUs: the layer split on 2 ranks (one GPU each) == 1 GPU, fp32.
# Skipped (exit 77) without a GPU. Env: QWENFT, WORK, SRC.
set -euo pipefail
if ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L > /dev/null 2>&1; then echo "no GPU: skipped"; exit 77; fi
export OMPI_ALLOW_RUN_AS_ROOT="${OMPI_ALLOW_RUN_AS_ROOT:-1}" OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}"
rm -rf "$WORK"; mkdir -p "$WORK"; cd "$WORK"
FIX="$SRC/tests/reference/fixtures"
NGPU=$(nvidia-smi -L | wc -l)
python3 - "$QWENFT" "$FIX" "$NGPU" "${MPIEXEC:-mpirun}" <<'PY'
import json, os, subprocess, sys
q, fix, ngpu, mpirun = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] or "mpirun"
bad = 0
def gen(backend, *args, np=1):
    env = dict(os.environ, QWENFT_BACKEND=backend)
    cmd = ([mpirun, "-np", str(np)] if np > 1 else []) + [q, "generate", "--json", "--timing", *args]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    if p.returncode: print(f"FAIL: {backend}: {' '.join(cmd)}: exit {p.returncode}\n{p.stderr}"); sys.exit(1)
    if backend == "cuda" and "(cuda" not in p.stderr: print(f"FAIL: did not run on the GPU:\n{p.stderr}"); sys.exit(1)
    return [json.loads(l) for l in p.stdout.splitlines()]
g = json.load(open(f"{fix}/generate.json")); n = 0
for case, runs in g["cases"].items():
    m = f"{fix}/{case}/hf"
    with open(f"{case}.jsonl", "w") as f:
        for r in runs: f.write(json.dumps({"prompt_ids": r["prompt"]}) + "\n")
    batch = gen("cuda", "--model", m, "--prompts", f"{case}.jsonl", "--max-new-tokens", str(g["max_new_tokens"]), "--dtype", "fp32")
    cpu = gen("cpu", "--model", m, "--prompts", f"{case}.jsonl", "--max-new-tokens", str(g["max_new_tokens"]))
    for r, b, c in zip(runs, batch, cpu):
        one = gen("cuda", "--model", m, "--prompt-ids", ",".join(map(str, r["prompt"])), "--max-new-tokens",
                  str(g["max_new_tokens"]), "--dtype", "fp32")[0]
        n += 1
        for what, ids in (("batched", b["ids"]), ("alone", one["ids"]), ("CPU table", c["ids"])):
            if ids != r["ids"]: bad += 1; print(f"FAIL {case} {r['prompt']} CUDA fp32 {what}: {ids} != {r['ids']}")
print(f"CUDA fp32: {n} fixture continuations (alone and batched) == transformers' greedy == CPU table")
# the widened model with the fixture tokenizer (tests/reference/widen_fixture.py, as unit_generate_batch.sh)
subprocess.run([sys.executable, f"{os.environ['SRC']}/tests/reference/widen_fixture.py", f"{fix}/qwen2_gqa_untied/hf", "wide"], check=True)
subprocess.run(["cp", f"{fix}/tokenizer/tokenizer.json", "wide/"], check=True)
with open("p.jsonl", "w") as f:
    for r in ({"prompt": "the quick brown fox"}, {"messages": [{"role": "user", "content": "hello there"}]},
              {"prompt_ids": [5, 9, 100, 1500, 3]}, {"prompt": "a"}) * 8: f.write(json.dumps(r) + "\n")
args = ["--model", "wide", "--prompts", "p.jsonl", "--max-new-tokens", "48"]
cpu = gen("cpu", *args); f32 = gen("cuda", *args, "--dtype", "fp32")
if [x["ids"] for x in f32] != [x["ids"] for x in cpu] or [x["text"] for x in f32] != [x["text"] for x in cpu]:
    bad += 1; print("FAIL: CUDA fp32 batch of 32 text/chat/id prompts differs from the CPU table")
else: print("CUDA fp32: a batch of 32 text/chat/id prompts == CPU table (ids and text)")
st = gen("cuda", *args, "--dtype", "fp32", "--stream-weights")
if [x["ids"] for x in st] != [x["ids"] for x in f32]: bad += 1; print("FAIL: --stream-weights (layers through two device slots, copy engine) != resident")
else: print("CUDA fp32: --stream-weights == resident weights (32 prompts)")
samp = ["--temperature", "0.8", "--top-k", "50", "--top-p", "0.95", "--seed", "3"]
sc, sg = gen("cpu", *args, *samp), gen("cuda", *args, *samp, "--dtype", "fp32")
same = sum(a["ids"] == b["ids"] for a, b in zip(sc, sg))
print(f"CUDA fp32 sampled: {same}/{len(sc)} prompts equal the CPU table's samples")
if same < len(sc) * 3 // 4: bad += 1; print("FAIL: sampled continuations on the GPU mostly differ from the CPU's")
for dt in ("bf16", "fp16"):
    out = gen("cuda", *args, "--dtype", dt)
    if len(out) != 32 or any(not (0 <= i < 2048) for o in out for i in o["ids"]): bad += 1; print(f"FAIL: {dt} output"); continue
    agree = sum(sum(1 for a, b in zip(x["ids"], y["ids"]) if a == b) for x, y in zip(out, f32))
    first = sum(x["ids"][:1] == y["ids"][:1] for x, y in zip(out, f32))
    print(f"CUDA {dt}: runs; first token equals fp32 on {first}/32 prompts, {agree} of {sum(len(y['ids']) for y in f32)} ids position-wise")
    if first < 24: bad += 1; print(f"FAIL: {dt} first tokens mostly differ from fp32")
# generate's calls run through the paged mode as serve's (decode.h): graphs on == off, bit for bit (bf16)
gb = gen("cuda", *args, "--dtype", "bf16"); gn = gen("cuda", *args, "--dtype", "bf16", "--cuda-graphs", "off")
if [x["ids"] for x in gb] != [x["ids"] for x in gn]: bad += 1; print("FAIL: bf16 batch: --cuda-graphs on != off")
else: print("CUDA bf16: a batch of 32 with the decoding steps as CUDA graphs == without")
o1 = gen("cuda", "--model", "wide", "--prompt", "the quick brown fox", "--max-new-tokens", "48", "--dtype", "bf16")
o0 = gen("cuda", "--model", "wide", "--prompt", "the quick brown fox", "--max-new-tokens", "48", "--dtype", "bf16",
         "--cuda-graphs", "off")
if o1[0]["ids"] != o0[0]["ids"]: bad += 1; print("FAIL: bf16 one prompt (fused decode kernels): graphs on != off")
else: print("CUDA bf16: one prompt (the fused decode kernels) with graphs == without")
ga = gen("cuda", *args, "--dtype", "bf16", "--decode-ahead", "off")
oa = gen("cuda", "--model", "wide", "--prompt", "the quick brown fox", "--max-new-tokens", "48", "--dtype", "bf16",
         "--decode-ahead", "off")
if [x["ids"] for x in gb] != [x["ids"] for x in ga] or o1[0]["ids"] != oa[0]["ids"]:
    bad += 1; print("FAIL: bf16: --decode-ahead on != off (the batch of 32, or one prompt)")
else: print("CUDA bf16: the batch of 32 and one prompt with the steps queued ahead == without")
if ngpu >= 2:
    two = gen("cuda", *args, "--dtype", "fp32", np=2)
    if [x["ids"] for x in two] != [x["ids"] for x in f32]: bad += 1; print("FAIL: 2-GPU layer split != 1 GPU")
    else: print("2 GPUs (layer split) == 1 GPU, fp32")
else:
    print("one GPU: the 2-GPU layer split is not run here (mpi_generate_split.sh runs it on CPU ranks)")
sys.exit(1 if bad else 0)
PY
echo PASS
