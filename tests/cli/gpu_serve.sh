#!/usr/bin/env bash
# serve on the CUDA tables (the paged mode of src/model/model.c with kernels/cuda's attention_paged):
#   - fp32: 40 concurrent greedy /generate requests (text prompts of different lengths, --max-batch 8, prefill
#     chunks of 16, so they queue, join a running batch and prefill in pieces) == the CPU table's `qwen-ft generate`
#     ids per prompt (generate on the CPU equals transformers' greedy on the fixtures: ref_generate), and a chat
#     request == generate --chat;
#   - bf16: the same requests run, every reply well-formed, and how many greedy continuations agree with fp32 is
#     reported (bf16 may part after a near-tie);
#   - /metrics after the run: no row or KV block left held;
#   - CUDA graphs (--cuda-graphs, default on: the decode step replayed as one graph per shape): the start-up log says
#     "cuda graphs: on (decode step)" and the stop line counts replays; bf16 requests one at a time (the same steps
#     every run) give the same ids with --cuda-graphs off as with graphs on (graph replays are the eager launches
#     bit for bit); the fp32 runs above (graphs on) equal CPU generate;
#   - decoding one step ahead (--decode-ahead, default on): the fp32 runs above ran with it (the log says so and
#     counts the steps queued ahead); bf16 requests one at a time give the same ids with --decode-ahead off;
#   - fp32 with a KV pool of 16 blocks (--max-batch-total-tokens 256) for 8 running requests: some are preempted
#     (/metrics counts them) and recomputed later; the same 40 replies == CPU generate;
#   - speculation (--speculate 4): fp32, 40 concurrent and one at a time, == CPU generate with drafts accepted; bf16
#     one at a time well-formed (its agreement with the steps without drafts reported);
#   - fp32 on 2 ranks sharing the GPU (mpirun: the layers split, src/serve/serve_split.c): the same 40 replies ==
#     CPU generate (skipped, saying so, where mpirun is not on PATH), and echo's prompt logprobs == one rank's
#     (within 1e-5; the head's rank computes them and sends them to rank 0);
#   - the prompt's logprobs (completions' echo, fp32): its prompt tokens' alternatives == the first generated
#     token's of a request over each prefix (within 1e-4); with max_tokens 0 the same prompt logprobs alone.
# Skipped (exit 77) without a GPU. Env: QWENFT, WORK, SRC.
set -euo pipefail
if ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L > /dev/null 2>&1; then echo "no GPU: skipped"; exit 77; fi
. "$SRC/tests/unit_common.sh"
fixture_prologue
wide_fixture
PYTHONPATH="$SRC/tests/tools" python3 - "$QWENFT" <<'PY'
import json, os, re, subprocess, sys, threading
from serve_harness import Server
q = sys.argv[1]; bad = 0
texts = ["the quick brown fox", "a", "hello there, general kenobi", "data " * 60, "one two three four five six",
         "zebra", "the model was trained on large amounts of data", "x y"] * 5
N = 32
with open("p.jsonl", "w") as f:
    for t in texts[:8]: f.write(json.dumps({"prompt": t}) + "\n")
    f.write(json.dumps({"messages": [{"role": "user", "content": "hello there"}]}) + "\n")
p = subprocess.run([q, "generate", "--model", "wide", "--prompts", "p.jsonl", "--json", "-n", str(N)], capture_output=True,
                   text=True, check=True, env=dict(os.environ, QWENFT_BACKEND="cpu"))
ref = [json.loads(l) for l in p.stdout.splitlines()]
echo_ref = {} # dtype: one rank's echo logprobs (the 2-rank run compares with them)
def run(dtype, ranks=1, extra=()):
    global bad
    os.environ["QWENFT_BACKEND"] = "cuda"
    pool, spec = "--max-batch-total-tokens" in extra, "--speculate" in extra
    log = f"serve_{dtype}_{ranks}{'_pool' if pool else ''}{'_spec' if spec else ''}.err"
    launcher = ("mpirun", "-np", str(ranks)) if ranks > 1 else ()
    S = Server(q, "--model", "wide", "--dtype", dtype, "--max-batch", "8", "--prefill-chunk", "16", *extra, log=log,
               launcher=launcher)
    if "on cuda" not in open(log).read(): bad += 1; print(f"FAIL: {dtype}: not on the GPU")
    out = {}
    def one(i):
        s, h, b = S.post("/generate", {"inputs": texts[i], "parameters": {"max_new_tokens": N, "details": True}})
        out[i] = [t["id"] for t in b["details"]["tokens"]] if s == 200 else (s, b)
    th = [threading.Thread(target=one, args=(i,)) for i in range(len(texts))]
    for t in th: t.start()
    for t in th: t.join()
    s, h, c = S.post("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hello there"}],
                                              "max_tokens": N, "temperature": 0})
    eb = {"prompt": texts[3], "max_tokens": 4, "temperature": 0, "logprobs": 3, "echo": True,
          "return_tokens_as_token_ids": True}
    se, he, e = S.post("/v1/completions", eb) # (s and c stay the chat request's: run returns its content)
    if ranks > 1: # the prompt's logprobs from the last rank == one rank's (the fp32 run before)
        L2 = e["choices"][0]["logprobs"] if se == 200 else None
        L1 = echo_ref.get(dtype)
        ok = L2 is not None and L1 is not None and L2["tokens"] == L1["tokens"] and all(
            (a is None and b is None) or (a is not None and b is not None and abs(a - b) <= 1e-5)
            for a, b in zip(L2["token_logprobs"], L1["token_logprobs"]))
        if not ok: bad += 1; print(f"FAIL: {dtype} on {ranks} ranks: echo {se} {str(e)[:300]} != one rank's")
        else: print(f"CUDA {dtype} serve on {ranks} ranks: echo's logprobs == one rank's (within 1e-5)")
    elif dtype == "fp32": # the prompt's logprobs (the head run again over the prompt rows on the GPU) == each prefix's
        L = e["choices"][0]["logprobs"]; P = e["usage"]["prompt_tokens"]
        if not extra: echo_ref[dtype] = L
        pids = [int(t.split(":")[1]) for t in L["tokens"][:P]]; worst = 0.0
        for t in (1, P // 3, P - 1):
            s1, h1, o1 = S.post("/v1/completions", {"prompt": pids[:t], "max_tokens": 1, "temperature": 0,
                                                    "logprobs": 3, "return_tokens_as_token_ids": True})
            d1 = o1["choices"][0]["logprobs"]["top_logprobs"][0]
            for k, x in d1.items():
                if k in L["top_logprobs"][t]: worst = max(worst, abs(L["top_logprobs"][t][k] - x))
                elif x > min(L["top_logprobs"][t].values()) + 1e-4: worst = 1.0
        s0, h0, z = S.post("/v1/completions", dict(eb, max_tokens=0)) # the prompt scored alone
        if s0 != 200 or z["choices"][0]["logprobs"]["token_logprobs"] != L["token_logprobs"][:P]:
            bad += 1; print(f"FAIL: fp32 echo, max_tokens 0: {s0} {str(z)[:200]}")
        if L["token_logprobs"][0] is not None or worst > 1e-4:
            bad += 1; print(f"FAIL: fp32 echo: prompt logprobs against each prefix's next-token ones: {worst}")
        else: print(f"CUDA fp32 serve: echo's {P} prompt logprobs == each prefix's next-token logprobs (within {worst:.1e})")
    m = S.metrics()
    if m["qwenft_batch_size"] != 0 or m["qwenft_kv_blocks_used"] != 0: bad += 1; print(f"FAIL: {dtype}: rows or blocks left held")
    if spec and m["qwenft_spec_accepted_tokens_total"] < 1: bad += 1; print(f"FAIL: {dtype} {extra}: no draft accepted")
    elif spec: print(f"CUDA {dtype} serve {' '.join(extra)}: {int(m['qwenft_spec_draft_tokens_total'])} draft tokens "
                     f"fed, {int(m['qwenft_spec_accepted_tokens_total'])} accepted")
    if pool and m["qwenft_preemptions_total"] < 1: bad += 1; print(f"FAIL: {dtype} {extra}: no preemption")
    elif pool: print(f"CUDA {dtype} serve {' '.join(extra)}: {int(m['qwenft_preemptions_total'])} preemptions, "
                      f"{int(m['qwenft_recomputed_tokens_total'])} positions recomputed")
    rc = S.stop_ranks() if ranks > 1 else S.stop()
    if rc != 0: bad += 1; print(f"FAIL: {dtype} on {ranks} rank(s): exit {rc} after SIGTERM")
    ah = re.search(r"(\d+) model calls, (\d+) of them queued before", open(log).read())
    if ranks == 1 and not spec and (not ah or int(ah.group(2)) < int(ah.group(1)) // 4):
        bad += 1; print(f"FAIL: {dtype}: decode ahead: {ah.group(0) if ah else 'no count in the log'}")
    return out, c["choices"][0]["message"]["content"] if s == 200 else None
f32, chat32 = run("fp32")
same = sum(f32[i] == ref[i % 8]["ids"] for i in range(len(texts)))
if same != len(texts): bad += 1; print(f"FAIL: CUDA fp32 serve: {same}/{len(texts)} greedy continuations == CPU generate")
else: print(f"CUDA fp32 serve: {len(texts)} concurrent greedy requests == CPU generate per prompt")
if chat32 != ref[8]["text"]: bad += 1; print(f"FAIL: CUDA fp32 chat {chat32!r} != generate --chat {ref[8]['text']!r}")
# a KV pool of 16 blocks for 8 running requests of up to 6: the newest are preempted and recomputed; the same replies
p32, pchat = run("fp32", extra=("--max-total-tokens", "128", "--max-batch-total-tokens", "256"))
same = sum(p32[i] == ref[i % 8]["ids"] for i in range(len(texts)))
if same != len(texts) or pchat != ref[8]["text"]:
    bad += 1; print(f"FAIL: CUDA fp32 serve with preemption: {same}/{len(texts)} greedy continuations == CPU generate")
else: print(f"CUDA fp32 serve with preemption: {len(texts)} concurrent greedy requests == CPU generate per prompt")
# speculation: up to 4 drafts a greedy request (several rows of one sequence a call, each a head row: the decode
# graphs, the two-token fused path and the attention of a call's own earlier rows); the same replies
s32, schat = run("fp32", extra=("--speculate", "4"))
same = sum(s32[i] == ref[i % 8]["ids"] for i in range(len(texts)))
if same != len(texts) or schat != ref[8]["text"]:
    bad += 1; print(f"FAIL: CUDA fp32 serve with --speculate 4: {same}/{len(texts)} greedy continuations == CPU generate")
else: print(f"CUDA fp32 serve with --speculate 4: {len(texts)} concurrent greedy requests == CPU generate per prompt")
b16, chat16 = run("bf16")
ok = all(isinstance(v, list) and len(v) >= 1 for v in b16.values())
if not ok: bad += 1; print(f"FAIL: bf16: bad replies {[v for v in b16.values() if not isinstance(v, list)][:3]}")
agree = sum(b16[i] == f32[i] for i in range(len(texts)))
print(f"CUDA bf16 serve: {len(texts)} replies well-formed; {agree}/{len(texts)} greedy continuations equal fp32's")
import re
def one_at_a_time(name, *extra, dtype="bf16"):
    os.environ["QWENFT_BACKEND"] = "cuda"
    log = f"serve_seq_{name}.err"
    S = Server(q, "--model", "wide", "--dtype", dtype, "--max-batch", "8", "--prefill-chunk", "16", *extra, log=log)
    out = []
    for t in texts[:8]:
        s, h, b = S.post("/generate", {"inputs": t, "parameters": {"max_new_tokens": N, "details": True}})
        out.append([t["id"] for t in b["details"]["tokens"]] if s == 200 else (s, b))
    S.stop()
    return out, open(log).read()
g_on, log_on = one_at_a_time("on")
g_off, log_off = one_at_a_time("graphs_off", "--cuda-graphs", "off")
g_sync, log_sync = one_at_a_time("ahead_off", "--decode-ahead", "off")
if "decode ahead: on" not in log_on or "decode ahead: off (--decode-ahead off)" not in log_sync:
    bad += 1; print("FAIL: the start-up logs do not say 'decode ahead: on' / 'off (--decode-ahead off)'")
if g_on != g_sync: bad += 1; print(f"FAIL: bf16 one at a time: decode ahead on != off: {sum(a == b for a, b in zip(g_on, g_sync))}/8 equal")
else: print("CUDA bf16 serve, one request at a time: decode ahead on == off for 8 prompts")
if "cuda graphs: on (decode step)" not in log_on: bad += 1; print("FAIL: graphs on: the start-up log does not say 'cuda graphs: on (decode step)'")
if "cuda graphs: off (--cuda-graphs off)" not in log_off: bad += 1; print("FAIL: --cuda-graphs off: not in the start-up log")
m = re.search(r"cuda graphs: (\d+) warm-ups, (\d+) captured, (\d+) updated for a new bound, (\d+) replays", log_on)
steps = sum(len(v) - 1 for v in g_on if isinstance(v, list)) # decoding calls (the first token comes with the prompt)
w, c, u, r = (int(x) for x in m.groups()) if m else (0, 0, 0, 0)
if not m or r < steps // 2 or w + c + u + r < steps: bad += 1; print(f"FAIL: graphs on: {m.group(0) if m else 'no graph counts in the log'} for {steps} decoding steps")
if g_on != g_off: bad += 1; print(f"FAIL: bf16 one at a time: graphs on != off: {sum(a == b for a, b in zip(g_on, g_off))}/8 equal")
else: print(f"CUDA bf16 serve, one request at a time: graphs on == off for 8 prompts ({steps} decoding steps: {w} warm-ups, {c} captures, {u} updates, {r} replays)")
# speculation one request at a time (batch 1: calls of the sequence's row and its drafts alone, as graphs): fp32 ==
# CPU generate; bf16 reported against the bf16 steps without drafts (other call shapes may part after a near-tie)
g_s32, log_s32 = one_at_a_time("spec_fp32", "--speculate", "4", dtype="fp32")
same = sum(g_s32[i] == ref[i]["ids"] for i in range(8))
ms = re.search(r"speculation: (\d+) draft tokens fed, (\d+) accepted", log_s32)
if same != 8 or not ms or int(ms.group(2)) < 1:
    bad += 1; print(f"FAIL: fp32 --speculate 4 one at a time: {same}/8 == CPU generate; {ms.group(0) if ms else 'no count'}")
else: print(f"CUDA fp32 serve --speculate 4, one request at a time: 8 replies == CPU generate ({ms.group(0)})")
g_s16, log_s16 = one_at_a_time("spec_bf16", "--speculate", "4")
ok = all(isinstance(v, list) and len(v) >= 1 for v in g_s16)
if not ok: bad += 1; print(f"FAIL: bf16 --speculate 4: bad replies {g_s16}")
else: print(f"CUDA bf16 serve --speculate 4, one at a time: {sum(a == b for a, b in zip(g_s16, g_on))}/8 equal the steps "
            "without drafts")
import shutil
if shutil.which("mpirun"):
    os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1"); os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
    os.environ.setdefault("OMPI_MCA_rmaps_base_oversubscribe", "1")
    s2, chat2 = run("fp32", ranks=2)
    same2 = sum(s2[i] == ref[i % 8]["ids"] for i in range(len(texts)))
    if same2 != len(texts) or chat2 != ref[8]["text"]:
        bad += 1; print(f"FAIL: CUDA fp32 serve on 2 ranks: {same2}/{len(texts)} greedy continuations == CPU generate")
    else: print(f"CUDA fp32 serve on 2 ranks (one GPU, the layers split): {len(texts)} replies == CPU generate")
else:
    print("skip: the 2-rank case (mpirun not on PATH)")
sys.exit(1 if bad else 0)
PY
echo PASS
