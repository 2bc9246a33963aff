#!/usr/bin/env bash
# serve's logprobs against transformers (tests/reference/fixtures/logprobs.json, made by
# tests/reference/make_logprobs_golden.py: the log-softmax of the raw float32 logits at each greedy step): the three
# fixture models served on the CPU with the fixture tokenizer, /v1/completions with the prompt as token ids,
# logprobs 5 and return_tokens_as_token_ids: the chosen ids, their logprobs and the 5 most likely ids with theirs
# (within 1e-5; where the 5th and 6th are closer than that, either may be 5th); chat's top_logprobs and TGI's
# top_n_tokens carry the same values (the same engine data in another shape: unit_serve). Then the same with
# echo: the prompt's own tokens (token t under position t - 1's logits) against prompt_steps, the generated part equal
# to the reply without echo.
# Env: QWENFT, WORK, SRC.
set -euo pipefail
. "$SRC/tests/unit_common.sh"
fixture_prologue
PYTHONPATH="$SRC/tests/tools" python3 - "$QWENFT" "$FIX" <<'PY'
import json, sys
from serve_harness import Server
q, fix = sys.argv[1], sys.argv[2]
g = json.load(open(f"{fix}/logprobs.json")); bad = 0; n = 0; pn = 0; K = 5; TOL = 1e-5; worst = 0.0
def fail(msg):
    global bad; bad += 1; print("FAIL:", msg)
for case, runs in g["cases"].items():
    S = Server(q, "--model", f"{fix}/{case}/hf", "--tokenizer", f"{fix}/tokenizer/tokenizer.json", log=f"{case}.err")
    try:
        for r in runs:
            s, h, b = S.post("/v1/completions", {"prompt": r["prompt"], "max_tokens": g["max_new_tokens"], "temperature": 0,
                                                 "logprobs": K, "return_tokens_as_token_ids": True})
            if s != 200: fail(f"{case} {r['prompt']}: status {s}: {b}"); continue
            lp = b["choices"][0]["logprobs"]
            ids = [int(t.split(":")[1]) for t in lp["tokens"]]
            want = [st["id"] for st in r["steps"]]
            if ids != want: fail(f"{case} {r['prompt']}: ids {ids}, transformers {want}"); continue
            for i, (st, v, top) in enumerate(zip(r["steps"], lp["token_logprobs"], lp["top_logprobs"])):
                n += 1
                where = f"{case} {r['prompt']} step {i}"
                worst = max(worst, abs(v - st["logprob"]))
                if abs(v - st["logprob"]) > TOL: fail(f"{where}: logprob {v}, transformers {st['logprob']}")
                ours = {int(k.split(":")[1]): x for k, x in top.items()}
                ref = dict((int(a), b) for a, b in st["top"])
                if len(ours) != K: fail(f"{where}: {len(ours)} alternatives, expected {K}")
                for t, x in ours.items():
                    if t not in ref or abs(x - ref[t]) > TOL: fail(f"{where}: id {t} {x}, transformers {ref.get(t)}")
                    else: worst = max(worst, abs(x - ref[t]))
                edge = st["top"][K - 1][1] - st["top"][K][1] < TOL # a near-tie at the 5th: either may be kept
                if not edge and set(ours) != set(a for a, _ in st["top"][:K]):
                    fail(f"{where}: top {sorted(ours)}, transformers {[a for a, _ in st['top'][:K]]}")
            # echo: the prompt's tokens first (the first with null logprob and dict), then the same generated ones
            s, h, e = S.post("/v1/completions", {"prompt": r["prompt"], "max_tokens": g["max_new_tokens"],
                                                 "temperature": 0, "logprobs": K, "echo": True,
                                                 "return_tokens_as_token_ids": True})
            if s != 200: fail(f"{case} {r['prompt']} echo: status {s}: {e}"); continue
            el, P = e["choices"][0]["logprobs"], len(r["prompt"])
            if [int(t.split(":")[1]) for t in el["tokens"]] != r["prompt"] + want:
                fail(f"{case} {r['prompt']} echo: tokens {el['tokens']}"); continue
            if el["token_logprobs"][0] is not None or el["top_logprobs"][0] is not None:
                fail(f"{case} {r['prompt']} echo: the first prompt token's logprob {el['token_logprobs'][0]}")
            if el["token_logprobs"][P:] != lp["token_logprobs"] or el["top_logprobs"][P:] != lp["top_logprobs"]:
                fail(f"{case} {r['prompt']} echo: the generated tokens' logprobs differ from the reply without echo")
            if el["text_offset"] != sorted(el["text_offset"]) or el["text_offset"][0] != 0:
                fail(f"{case} {r['prompt']} echo: text_offset {el['text_offset']}")
            for st, v, top in zip(r["prompt_steps"], el["token_logprobs"][1:P], el["top_logprobs"][1:P]):
                n += 1; pn += 1
                where = f"{case} {r['prompt']} prompt token {st['id']}"
                worst = max(worst, abs(v - st["logprob"]))
                if abs(v - st["logprob"]) > TOL: fail(f"{where}: logprob {v}, transformers {st['logprob']}")
                ours = {int(k.split(":")[1]): x for k, x in top.items()}
                ref = dict((int(a), b) for a, b in st["top"])
                for t_, x in ours.items():
                    if t_ != st["id"] and (t_ not in ref or abs(x - ref[t_]) > TOL):
                        fail(f"{where}: id {t_} {x}, transformers {ref.get(t_)}")
                edge = st["top"][K - 1][1] - st["top"][K][1] < TOL
                got = set(ours) - ({st["id"]} if len(ours) > K else set())
                if not edge and got != set(a for a, _ in st["top"][:K]):
                    fail(f"{where}: top {sorted(ours)}, transformers {[a for a, _ in st['top'][:K]]}")
    finally:
        if S.stop() != 0: fail(f"{case}: exit after SIGTERM")
print(f"logprobs: {n} steps ({pn} of them prompt tokens, echo) of {len(g['cases'])} fixture models == transformers "
      f"{g['transformers']} (the chosen id, its logprob, the {K} most likely with theirs, within {TOL}; the largest "
      f"difference {worst:.2e})")
sys.exit(1 if bad else 0)
PY
echo PASS
