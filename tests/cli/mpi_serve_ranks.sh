#!/usr/bin/env bash
# qwen-ft serve under mpirun: the layers split over the ranks as generate's (src/serve/serve_split.c). With the tiny
# fixture model widened to the fixture tokenizer (2 layers) on 2 ranks (one layer each) and 3 ranks (rank 0 holds
# only the embedding):
#   - every greedy reply under concurrency (--max-batch 3, --prefill-chunk 8: requests queue, join a running batch and
#     prefill in chunks) has exactly the tokens `qwen-ft generate` gives on one rank, TGI details ids and a stream;
#     a sampled request with a seed too (the logits travel from the last rank to rank 0)
#   - the prompt's log-probabilities (TGI decoder_input_details, vLLM prompt_logprobs with alternatives and ranks,
#     OpenAI echo with max_tokens 0 and logprobs) equal one rank's server's, a prompt over several prefill chunks
#     (the head's rank computes them and sends them to rank 0)
#   - each rank says which layers it holds; SIGTERM to rank 0 (2 ranks), or to every rank as srun/scancel send it
#     (3 ranks), drains and every rank exits 0 (so does mpirun). (A SIGTERM to mpirun itself reaches every rank
#     and drains the same way, but Open MPI's mpirun then exits 1 for a job it signalled: not tested.)
#   - on 3 ranks over a pool of 5 blocks, requests are preempted and recomputed (3 greedy choices of one request
#     admitted together always are): the same replies
#   - on 2 ranks with --speculate 4 (drafts accepted): the same greedy replies, a seeded sample == one rank's server's
#     with --speculate 4
#   - bad input is said once (rank 0) with exit 2 on every rank, before anything listens
# Env: QWENFT, WORK, SRC (tests/mpi_common.sh).
source "$SRC/tests/mpi_common.sh"
. "$SRC/tests/unit_common.sh"
FIX="$SRC/tests/reference/fixtures"
wide_fixture

rc=0
timeout 60 "$MPIRUN" -np 2 "$QWENFT" serve --model wide --port 0 --max-total-tokens 1 > bad.out 2> bad.err || rc=$?
[ "$rc" -eq 2 ] || { echo "FAIL: bad --max-total-tokens on 2 ranks: exit $rc, expected 2"; cat bad.err; exit 1; }
n=$(grep -c "max-total-tokens 1: at least 2" bad.err || true)
[ "$n" -eq 1 ] || { echo "FAIL: expected the refusal once, got $n times:"; cat bad.err; exit 1; }
! grep -q "listening on" bad.err || { echo "FAIL: it listened"; exit 1; }
echo "ok: bad input on 2 ranks: exit 2, said once"

PYTHONPATH="$SRC/tests/tools" python3 - "$QWENFT" "$MPIRUN" <<'PY'
import json, re, subprocess, sys, threading
from serve_harness import Server
q, mpirun = sys.argv[1], sys.argv[2]; bad = 0
def fail(msg):
    global bad; bad += 1; print("FAIL:", msg)

texts = ["the quick brown fox", "a", "hello there, general kenobi", "data " * 30, "one two three four five six",
         "zebra", "the model was trained on large amounts of data"]
N = 16
with open("p.jsonl", "w") as f:
    for t in texts: f.write(json.dumps({"prompt": t}) + "\n")
def generate(*extra):
    p = subprocess.run([q, "generate", "--model", "wide", "--prompts", "p.jsonl", "--json", "-n", str(N), *extra],
                       capture_output=True, text=True)
    if p.returncode: print(p.stderr); sys.exit(1)
    return [json.loads(l) for l in p.stdout.splitlines()]
ref = generate()
ref_ids = [r["ids"] for r in ref]
with open("pa.jsonl", "w") as f: f.write(json.dumps({"prompt": "a"}) + "\n")
pa = subprocess.run([q, "generate", "--model", "wide", "--prompts", "pa.jsonl", "--json", "-n", "60"],
                    capture_output=True, text=True)
if pa.returncode: print(pa.stderr); sys.exit(1)
ref_a = json.loads(pa.stdout.splitlines()[0])
seeded_ids = generate("--temperature", "0.8", "--top-k", "20", "--seed", "11")[0]["ids"] # row 0: serve's stream
# the prompt's logprobs: one rank's server is the reference (texts[3]: 30+ tokens, several chunks of 8)
plp_reqs = [("/generate", {"inputs": texts[3], "parameters": {"max_new_tokens": 2, "details": True,
                                                             "decoder_input_details": True}}),
            ("/v1/completions", {"model": "m", "prompt": texts[3], "max_tokens": 2, "prompt_logprobs": 3}),
            ("/v1/completions", {"model": "m", "prompt": texts[6], "max_tokens": 0, "echo": True, "logprobs": 2})]
def plp_of(path, b):
    if path == "/generate": return b["details"]["prefill"]
    c = b["choices"][0]
    return c.get("prompt_logprobs") or c["logprobs"]
# (with --speculate 4: the 2-rank server's reference for a seeded sample, whose draws differ from generate's there)
seed_par = {"max_new_tokens": N, "details": True, "do_sample": True, "temperature": 0.8, "top_k": 20, "seed": 11}
S = Server(q, "--model", "wide", "--max-batch", "3", "--prefill-chunk", "8", "--max-total-tokens", "256",
           "--speculate", "4", log="serve1.err")
try:
    s, h, b = S.post("/generate", {"inputs": texts[0], "parameters": seed_par})
    seeded_spec = [t["id"] for t in b["details"]["tokens"]] if s == 200 else (s, b)
    plp_ref = []
    for path, body in plp_reqs:
        s, h, b = S.post(path, body)
        if s != 200: fail(f"1 rank: {path} {body}: {s} {b}")
        plp_ref.append(plp_of(path, b) if s == 200 else None)
finally:
    S.stop()
if plp_ref[0] is not None and len(plp_ref[0]) < 25: fail(f"1 rank: the prefill has {len(plp_ref[0])} tokens, expected 25+")

for np_ in (2, 3):
    # 3 ranks: a pool of 5 blocks (--max-batch-total-tokens 80): the 7 requests may or may not overlap enough to
    # preempt, the 3 choices of one request (admitted in one step, growing to 4 blocks each) do: the newest are
    # preempted and recomputed, the block tables going to every rank as they change
    pool = ("--max-total-tokens", "64", "--max-batch-total-tokens", "80") if np_ == 3 else ("--max-total-tokens", "256")
    # 2 ranks: speculation (--speculate 4): the drafts' rows go through both ranks, their picks back to rank 0
    spec = ("--speculate", "4") if np_ == 2 else ()
    S = Server(q, "--model", "wide", "--max-batch", "3", "--max-queue", "64", "--prefill-chunk", "8", *pool, *spec,
               log=f"serve{np_}.err", launcher=(mpirun, "-np", str(np_)))
    try:
        got = {}
        def worker(i):
            s, h, b = S.post("/generate", {"inputs": texts[i], "parameters": {"max_new_tokens": N, "details": True}})
            got[i] = [t["id"] for t in b["details"]["tokens"]] if s == 200 else (s, b)
        ts = [threading.Thread(target=worker, args=(i,)) for i in range(len(texts))]
        for t in ts: t.start()
        for t in ts: t.join()
        for i in range(len(texts)):
            if got.get(i) != ref_ids[i]: fail(f"{np_} ranks, prompt {i}: {got.get(i)} != generate's {ref_ids[i]}")
        if np_ == 3: # 3 choices of one request join the batch together (1 block each) and grow to 4 blocks each
            s, h, b = S.post("/v1/completions", {"model": "m", "prompt": "a", "max_tokens": 60, "n": 3,
                                                 "temperature": 0})
            texts_n = [c["text"] for c in b["choices"]] if s == 200 else (s, b)
            if texts_n != [ref_a["text"]] * 3: fail(f"3 ranks, n = 3 over 5 blocks: {texts_n} != 3 x {ref_a['text']!r}")
        if np_ == 2: # alone in the batch: its drafts take the spare head rows
            s, h, b = S.post("/v1/completions", {"model": "m", "prompt": "a", "max_tokens": 60, "temperature": 0})
            t2 = b["choices"][0]["text"] if s == 200 else (s, b)
            if t2 != ref_a["text"]: fail(f"2 ranks, --speculate 4, alone: {t2!r} != generate's {ref_a['text']!r}")
        npre = S.metrics()["qwenft_preemptions_total"]
        if np_ == 3 and npre < 1: fail("3 ranks, a pool of 5 blocks: no request was preempted")
        nacc = S.metrics()["qwenft_spec_accepted_tokens_total"]
        if np_ == 2 and nacc < 1: fail("2 ranks, --speculate 4: no draft accepted")
        ev = S.sse("/generate_stream", {"inputs": texts[2], "parameters": {"max_new_tokens": N}})
        ids = [json.loads(e)["token"]["id"] for e in ev]
        if ids != ref_ids[2]: fail(f"{np_} ranks, stream: {ids} != {ref_ids[2]}")
        s, h, b = S.post("/generate", {"inputs": texts[0], "parameters": seed_par})
        sids = [t["id"] for t in b["details"]["tokens"]] if s == 200 else (s, b)
        if spec and sids != seeded_spec: fail(f"{np_} ranks, seeded sample: {sids} != one rank's {seeded_spec}")
        if not spec and sids != seeded_ids: fail(f"{np_} ranks, seeded sample: {sids} != generate --seed's {seeded_ids}")
        res = {}
        def plp_worker(i): # concurrently, beside each other's chunks
            path, body = plp_reqs[i]
            s, h, b = S.post(path, body)
            res[i] = plp_of(path, b) if s == 200 else (s, b)
        ts = [threading.Thread(target=plp_worker, args=(i,)) for i in range(len(plp_reqs))]
        for t in ts: t.start()
        for t in ts: t.join()
        for i in range(len(plp_reqs)):
            if res.get(i) != plp_ref[i]:
                fail(f"{np_} ranks: {plp_reqs[i]}: the prompt's logprobs {res.get(i)} != one rank's {plp_ref[i]}")
    finally: # SIGTERM to rank 0 (2 ranks) or to every rank (3), not to mpirun
        rc = S.stop_ranks(which={0} if np_ == 2 else None)
    log = open(f"serve{np_}.err").read()
    if rc != 0: fail(f"{np_} ranks: exit {rc} after SIGTERM:\n{log}")
    for r in range(np_):
        if not re.search(f"rank {r} of {np_} \\(pid \\d+\\): layers \\[", log): fail(f"{np_} ranks: rank {r} did not say its layers:\n{log}")
    if "the layers split over %d ranks" % np_ not in log: fail(f"{np_} ranks: no split line:\n{log}")
    if not bad:
        seeded_what = "one rank's --speculate 4 server's" if spec else "generate's on one rank"
        print(f"ok: {np_} ranks: {len(texts)} concurrent greedy replies ({int(npre)} preemptions"
              + (f", {int(nacc)} drafts accepted" if spec else "") + ") and a stream equal generate's on one rank, "
              f"a seeded sample == {seeded_what}; the prompt's logprobs (TGI, vLLM, echo) equal one rank's server's; "
              "SIGTERM: exit 0")
sys.exit(1 if bad else 0)
PY
