#!/usr/bin/env bash
# qwen-ft serve (src/serve/) on 127.0.0.1 with the tiny fixture model widened to the fixture tokenizer (as
# unit_generate_batch), standard-library HTTP only (tests/tools/serve_harness.py):
#   - greedy under concurrency == `qwen-ft generate` greedy for every prompt (TGI details ids, OpenAI completion and
#     chat text), with --max-batch 3 and --prefill-chunk 8, so prompts join a running batch, wait in the queue and
#     prefill in several chunks beside decoding rows; two seeded sampled requests among them == generate --seed with
#     the same options; with --decode-ahead on (the default: most calls queued before the previous call's picks are
#     read, the log's count at the stop says how many) and off (none), the same replies
#   - the prefix cache (--prefix-cache on, the default): prompts that start with an earlier prompt's tokens share its
#     cached blocks (the hit counter of /metrics grows by whole blocks, the cached-blocks gauge holds them after the
#     replies) and still give generate's tokens, a next turn (the first prompt and its reply) shares the reply's rows
#     too; with --prefix-cache off nothing is taken from it, the same replies
#   - streaming: TGI events (index, token, generated_text and details on the last) concatenate to /generate's text;
#     OpenAI chunks end with finish_reason, then data: [DONE]
#   - logprobs: OpenAI completions (logprobs N, a prompt of token ids, return_tokens_as_token_ids), chat (logprobs,
#     top_logprobs), streamed and not, and TGI's top_n_tokens (details and stream): the chosen token is the first of
#     its alternatives under greedy, its logprob the one TGI's details report (the backend's pick), the alternatives
#     sorted, the text offsets add up; the replies' text and ids unchanged by asking (transformers' values:
#     ref_serve_logprobs); the prompt's own (completions' echo, TGI's decoder_input_details) against each prefix's
#     next-token logprobs, streamed and not, with the prompt cached, n = 2 and max_tokens 0 (the prompt scored alone);
#     vLLM's prompt_logprobs (ranks, completions and chat) with echo's values
#   - n choices (OpenAI): choice k of a seeded request == generate --seed (seed + k), streamed by index too; greedy
#     choices == greedy; usage counts every choice; n over --max-queue is 400; the choices after the first share its
#     prompt's cached blocks; best_of (completions: the n best of best_of == n = best_of's choices ranked by mean
#     logprob, best first; TGI: the best, the others in details.best_of_sequences best first) and its refusals
#   - penalties and biases: OpenAI's logit_bias (+100 forces an id, -100 bans the greedy one), frequency and presence
#     penalties and TGI's frequency_penalty (each greedy step == the argmax of the reported raw logprobs less the
#     penalties restated), vLLM's min_p (1: sampling == greedy), TGI's typical_p (seeded: repeatable) and truncate (the
#     prompt's last N tokens: the same reply as those tokens as a prompt)
#   - vLLM's ignore_eos (an end-of-text token biased to be every pick: max_tokens of them, no text) and min_tokens
#     (masked until then)
#   - response_format json_object: biased greedy gives exactly {"":""} (the stop token masked until the object is
#     complete); seeded chat replies that stop are JSON objects; a stream's text == the reply's
#   - every malformed request is 400 with a JSON error naming the field; 404, 405, 413 (body cap); --api-key: 401
#     everywhere but /health; a full queue is 503 with Retry-After
#   - a client that disconnects mid-stream, or while waiting for a whole reply, is cancelled (its slot and blocks
#     come back) long before max_new
#   - /metrics counts the requests, tokens and latencies; /info and /v1/models describe the server
#   - SIGTERM: no new requests, the running stream finishes, exit 0
#   - --model preset:NAME unknown, or a missing --model: exit 2 naming it; --cuda-graphs other than on|off: exit 2
#     naming the option (--decode-ahead, --prefix-cache too); the start-up log says whether the decode step runs as CUDA graphs (the
#     CPU: off, why) and whether calls are queued ahead
# Env: QWENFT (binary), WORK (scratch dir, created here), SRC (source tree).
set -euo pipefail
. "$SRC/tests/unit_common.sh"
fixture_prologue
wide_fixture
# --model: an unknown preset or a missing model is exit 2 naming it, before anything listens
for m in preset:qwen9-1t no/such/model.h5; do # (the preset named with "serve: --model preset:qwen9-1t: unknown preset")
  rc=0; "$QWENFT" serve --model "$m" --port 0 > /dev/null 2> bad.err || rc=$?
  [ $rc -eq 2 ] && grep -qF "$m" bad.err || { echo "FAIL: serve --model $m: exit $rc: $(cat bad.err)"; exit 1; }
done
for o in cuda-graphs decode-ahead prefix-cache preemption; do for v in maybe ON 1; do # on or off only
  rc=0; "$QWENFT" serve --model wide --$o "$v" --port 0 > /dev/null 2> bad.err || rc=$?
  [ $rc -eq 2 ] && grep -qF -- "$o" bad.err || { echo "FAIL: serve --$o $v: exit $rc: $(cat bad.err)"; exit 1; }
done; done
# a KV pool smaller than one request: exit 2 naming the option
rc=0; "$QWENFT" serve --model wide --max-total-tokens 160 --max-batch-total-tokens 100 --port 0 > /dev/null 2> bad.err || rc=$?
[ $rc -eq 2 ] && grep -qF -- "--max-batch-total-tokens 100" bad.err ||
  { echo "FAIL: serve --max-batch-total-tokens 100: exit $rc: $(cat bad.err)"; exit 1; }
# ... or than one model call's tokens (the defaults: --prefill-chunk 2048 + --max-batch 32)
rc=0; "$QWENFT" serve --model wide --max-total-tokens 160 --max-batch-total-tokens 320 --port 0 > /dev/null 2> bad.err || rc=$?
[ $rc -eq 2 ] && grep -qF -- "--prefill-chunk 2048 + --max-batch 32" bad.err ||
  { echo "FAIL: serve --max-batch-total-tokens 320 beside --prefill-chunk 2048: exit $rc: $(cat bad.err)"; exit 1; }

PYTHONPATH="$SRC/tests/tools" python3 - "$QWENFT" <<'PY'
import json, signal, socket, subprocess, sys, threading, time
from serve_harness import Server
q = sys.argv[1]; bad = 0
def fail(msg):
    global bad; bad += 1; print("FAIL:", msg)
def expect(what, ours, want):
    if ours != want: fail(f"{what}:\n  ours {ours!r}\n  want {want!r}")

def generate(recs, n, *extra):
    with open("p.jsonl", "w") as f:
        for r in recs: f.write(json.dumps(r) + "\n")
    p = subprocess.run([q, "generate", "--model", "wide", "--prompts", "p.jsonl", "--json", "-n", str(n), *extra],
                       capture_output=True, text=True)
    if p.returncode: print(p.stderr); sys.exit(1)
    return [json.loads(l) for l in p.stdout.splitlines()]

def parity(S, ref, ref_chat, samp, texts, chat_msgs, N, what):
    """greedy requests of every kind, and two seeded sampled ones among them, all at once: each == generate's"""
    results = {}
    def worker(k, kind, i):
        if kind == "tgi":
            s, h, b = S.post("/generate", {"inputs": texts[i], "parameters": {"max_new_tokens": N, "details": True}})
            results[k] = (s, [t["id"] for t in b["details"]["tokens"]] if s == 200 else b)
        elif kind == "samp":
            s, h, b = S.post("/generate", {"inputs": texts[0], "parameters": {"max_new_tokens": N, "do_sample": True,
                             "temperature": 0.8, "top_k": 40, "top_p": 0.9, "seed": 7, "details": True}})
            results[k] = (s, [t["id"] for t in b["details"]["tokens"]] if s == 200 else b)
        elif kind == "cmpl":
            s, h, b = S.post("/v1/completions", {"model": "wide", "prompt": texts[i], "max_tokens": N, "temperature": 0})
            results[k] = (s, b["choices"][0]["text"] if s == 200 else b)
        else:
            s, h, b = S.post("/v1/chat/completions", {"model": "wide", "messages": chat_msgs[i], "max_tokens": N,
                                                      "temperature": 0})
            results[k] = (s, b["choices"][0]["message"]["content"] if s == 200 else b)
    jobs = [(f"tgi{r}-{i}", "tgi", i) for r in range(3) for i in range(len(texts))]
    jobs += [(f"cmpl{i}", "cmpl", i) for i in range(len(texts))] + [(f"chat{i}", "chat", i) for i in range(2)]
    jobs[5:5] = [("samp0", "samp", 0)]
    jobs[17:17] = [("samp1", "samp", 0)]
    th = [threading.Thread(target=worker, args=j) for j in jobs]
    for t in th: t.start()
    for t in th: t.join()
    for k, kind, i in jobs:
        s, v = results[k]
        if s != 200: fail(f"{what}: {k}: status {s}: {v}"); continue
        if kind == "tgi": expect(f"{what}: {k} ids == generate", v, ref[i]["ids"])
        elif kind == "samp": expect(f"{what}: {k} sampled, seed 7 == its reference (generate --seed 7; under --speculate the request alone)", v, samp[0]["ids"])
        elif kind == "cmpl" and ref[i]["finish"] == "length": expect(f"{what}: {k} text == generate", v, ref[i]["text"])
        elif kind == "chat": expect(f"{what}: {k} text == generate --chat", v, ref_chat[i]["text"])
    print(f"{what}: greedy: {len(jobs) - 2} concurrent requests (batch <= 3, prefill chunks of 8) and 2 sampled among "
          "them == qwen-ft generate per prompt" + (" (the sampled: == the request alone)" if samp[0].get("text") is None
                                                  else ""))

def ahead_counts(log):
    """(model calls, calls queued ahead) from the log's line at the stop"""
    import re
    m = re.search(r"(\d+) model calls, (\d+) of them queued before", open(log).read())
    return (int(m.group(1)), int(m.group(2))) if m else None

S = Server(q, "--model", "wide", "--max-batch", "3", "--max-queue", "64", "--prefill-chunk", "8",
           "--max-total-tokens", "256", "--max-input-tokens", "128")
if "decode ahead: on\n" not in open("serve.err").read(): fail("start-up log: no 'decode ahead: on'")
if "cuda graphs: off (the CPU backend)" not in open("serve.err").read(): fail("start-up log: no 'cuda graphs: off (the CPU backend)'")
try:
    # ---- greedy parity under concurrency ----------------------------------------------------------------------
    texts = ["the quick brown fox", "a", "hello there, general kenobi", "data " * 30, "one two three four five six",
             "zebra", "the model was trained on large amounts of data", "x y"]
    N = 24
    ref = generate([{"prompt": t} for t in texts], N)
    chat_msgs = [[{"role": "user", "content": "hello there"}],
                 [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "what is 2+2?"}]]
    ref_chat = generate([{"messages": m} for m in chat_msgs], N)
    samp = generate([{"prompt": texts[0]}], N, "--temperature", "0.8", "--top-k", "40", "--top-p", "0.9", "--seed", "7")
    parity(S, ref, ref_chat, samp, texts, chat_msgs, N, "decode ahead on")
    # ---- the prefix cache: a shared start of 3+ blocks, one prompt first (its blocks registered), then the others at
    # once; each == generate, and the hits are whole blocks of 16 positions, at least 2 a later prompt
    pre = "the model was trained on large amounts of data, " * 5
    ptexts = [pre + t for t in ("one", "two three four", "zebra x y z", "one")]
    pref = generate([{"prompt": t} for t in ptexts], N)
    h0 = S.metrics()["qwenft_prefix_cache_hit_tokens_total"]
    pres = {}
    def pworker(i):
        s, h, b = S.post("/generate", {"inputs": ptexts[i], "parameters": {"max_new_tokens": N, "details": True}})
        pres[i] = [t["id"] for t in b["details"]["tokens"]] if s == 200 else (s, b)
    pworker(0)
    h1 = S.metrics()["qwenft_prefix_cache_hit_tokens_total"]
    th = [threading.Thread(target=pworker, args=(i,)) for i in range(1, 4)]
    for t in th: t.start()
    for t in th: t.join()
    for i in range(4): expect(f"prefix cache: prompt {i} ids == generate", pres[i], pref[i]["ids"])
    m = S.metrics()
    hits = m["qwenft_prefix_cache_hit_tokens_total"] - h1
    if hits % 16 or hits < 3 * 2 * 16: fail(f"prefix cache: {hits} tokens taken from it by 3 prompts sharing 3+ blocks")
    if m["qwenft_kv_blocks_cached"] < 3: fail(f"prefix cache: {m['qwenft_kv_blocks_cached']} blocks cached after the replies")
    print(f"prefix cache: 3 prompts starting as an earlier one took {hits} prompt tokens from it (before: {h1 - h0} "
          f"by the first), replies == generate; {m['qwenft_kv_blocks_cached']} blocks cached")
    # a next turn: the rows of a reply's tokens (fed back) stay cached too, so a prompt made of the first prompt and
    # its reply takes blocks past the first prompt's own (here the reply's first token re-encodes to the same id: one
    # block more); its reply == generate's
    p1 = "the model was trained on large amounts of data, " * 2
    s, h, b = S.post("/v1/completions", {"model": "wide", "prompt": p1, "max_tokens": 40, "temperature": 0})
    own = (b["usage"]["prompt_tokens"] - 1) // 16 * 16 # the first prompt's blocks that a longer prompt can share
    p2 = p1 + b["choices"][0]["text"] + " and then"
    h2 = S.metrics()["qwenft_prefix_cache_hit_tokens_total"]
    s, h, b = S.post("/v1/completions", {"model": "wide", "prompt": p2, "max_tokens": 8, "temperature": 0})
    hits = S.metrics()["qwenft_prefix_cache_hit_tokens_total"] - h2
    ref2 = generate([{"prompt": p2}], 8)[0]
    if hits <= own: fail(f"prefix cache, next turn: {hits} tokens taken, not past the first prompt's {own}")
    if ref2["finish"] == "length": expect("prefix cache, next turn: reply == generate", b["choices"][0]["text"], ref2["text"])
    expect("prefix cache, next turn: reply ids == generate (TGI)", [t["id"] for t in S.post("/generate", {"inputs": p2,
           "parameters": {"max_new_tokens": 8, "details": True}})[2]["details"]["tokens"]], ref2["ids"])
    print(f"prefix cache, next turn: {hits} prompt tokens from the cache (the first prompt's own blocks: {own}), "
          "reply == generate")
    # seeded sampling == generate --seed (the first prompt's stream)
    for _ in range(2):
        s, h, b = S.post("/generate", {"inputs": texts[0], "parameters": {"max_new_tokens": N, "do_sample": True,
                         "temperature": 0.8, "top_k": 40, "top_p": 0.9, "seed": 7, "details": True}})
        expect("sampled, seed 7 == generate --seed 7", [t["id"] for t in b["details"]["tokens"]], samp[0]["ids"])
        expect("details.seed", b["details"]["seed"], 7)
    # ---- streaming -----------------------------------------------------------------------------------------------
    s, h, full = S.post("/generate", {"inputs": texts[2], "parameters": {"max_new_tokens": N}})
    ev = [json.loads(e) for e in S.sse("/generate_stream", {"inputs": texts[2], "parameters": {"max_new_tokens": N}})]
    expect("stream: events", len(ev), N)
    expect("stream: indices", [e["index"] for e in ev], list(range(1, N + 1)))
    expect("stream: ids", [e["token"]["id"] for e in ev], ref[2]["ids"])
    expect("stream: token texts concatenate", "".join(e["token"]["text"] for e in ev), full["generated_text"])
    expect("stream: last generated_text", ev[-1]["generated_text"], full["generated_text"])
    expect("stream: only the last has generated_text", [e["generated_text"] is None for e in ev[:-1]], [True] * (N - 1))
    expect("stream: details", (ev[-1]["details"]["finish_reason"], ev[-1]["details"]["generated_tokens"]), ("length", N))
    ev2 = S.sse("/generate", {"inputs": texts[2], "parameters": {"max_new_tokens": 4}, "stream": True})
    expect("/generate with stream: true streams", len(ev2), 4)
    for path, body, key in (("/v1/completions", {"prompt": texts[2]}, "text"),
                            ("/v1/chat/completions", {"messages": chat_msgs[0]}, "delta")):
        body = dict(body, model="wide", max_tokens=N, temperature=0)
        s, h, one = S.post(path, body)
        chunks = S.sse(path, dict(body, stream=True, stream_options={"include_usage": True}))
        expect(f"{path} stream ends with [DONE]", chunks[-1], "[DONE]")
        objs = [json.loads(c) for c in chunks[:-1]]
        usage = objs[-1]
        expect(f"{path} usage chunk", (usage["choices"], usage["usage"]["completion_tokens"]), ([], N))
        objs = objs[:-1]
        got = "".join((c["choices"][0]["delta"].get("content") or "") if key == "delta" else c["choices"][0]["text"]
                      for c in objs)
        want = one["choices"][0]["message"]["content"] if key == "delta" else one["choices"][0]["text"]
        expect(f"{path} stream text == non-stream", got, want)
        expect(f"{path} finish_reason on the last chunk", [c["choices"][0]["finish_reason"] for c in objs][-1], "length")
        if key == "delta": expect("chat: first delta has the role", objs[0]["choices"][0]["delta"].get("role"), "assistant")
        expect(f"{path} object", objs[0]["object"], "chat.completion.chunk" if key == "delta" else "text_completion")
    # stop sequences: TGI keeps the stop text, OpenAI cuts before it
    base = ref[0]["text"]
    stop = base[6:9]
    if len(stop) == 3:
        s, h, t = S.post("/generate", {"inputs": texts[0], "parameters": {"max_new_tokens": N, "stop": [stop]}})
        g = t["generated_text"]
        if not (stop in g and base.startswith(g) and t["generated_text"] != base): fail(f"TGI stop {stop!r}: {g!r} of {base!r}")
        s, h, o = S.post("/v1/completions", {"model": "m", "prompt": texts[0], "max_tokens": N, "temperature": 0, "stop": stop})
        expect("OpenAI stop: text before the stop string", o["choices"][0]["text"], base[:base.index(stop)])
        expect("OpenAI stop: finish_reason", o["choices"][0]["finish_reason"], "stop")
    print("streaming: TGI events and OpenAI chunks == the non-streamed replies; stop sequences")
    # ---- logprobs: the chosen token's (TGI details: the backend's pick and log-softmax) against the host's top
    # alternatives (asking for them moves the pick to the host), each API's shape, the text and ids unchanged -----
    K = 4
    s, h, d = S.post("/generate", {"inputs": texts[2], "parameters": {"max_new_tokens": N, "details": True}})
    ids, lps = [t["id"] for t in d["details"]["tokens"]], [t["logprob"] for t in d["details"]["tokens"]]
    close = lambda a, b: abs(a - b) < 1e-5
    s, h, d2 = S.post("/generate", {"inputs": texts[2], "parameters": {"max_new_tokens": N, "details": True,
                                                                      "top_n_tokens": K}})
    expect("TGI top_n_tokens: ids unchanged", [t["id"] for t in d2["details"]["tokens"]], ids)
    tops = d2["details"]["top_tokens"]
    expect("TGI top_tokens: K a token", [len(t) for t in tops], [K] * N)
    if not all(t[0]["id"] == i and close(t[0]["logprob"], lp) for t, i, lp in zip(tops, ids, lps)):
        fail(f"TGI top_tokens: the first is not the chosen token with its logprob: {tops[:2]} vs {ids[:2]} {lps[:2]}")
    if not all(a["logprob"] >= b["logprob"] for t in tops for a, b in zip(t, t[1:])): fail("TGI top_tokens: not sorted")
    ev = [json.loads(e) for e in S.sse("/generate_stream", {"inputs": texts[2], "parameters": {"max_new_tokens": N,
                                                                                              "top_n_tokens": K}})]
    expect("TGI stream top_tokens == details'", [e["top_tokens"] for e in ev], tops)
    body = {"model": "wide", "prompt": ids[:6], "max_tokens": N, "temperature": 0, "logprobs": K}
    s, h, c = S.post("/v1/completions", body) # a prompt of token ids: its continuation, as generate's of those ids
    ref_ids = generate([{"prompt_ids": ids[:6]}], N)[0]
    lp = c["choices"][0]["logprobs"]
    expect("completions prompt ids: text == generate", c["choices"][0]["text"], ref_ids["text"])
    expect("completions logprobs: tokens", len(lp["tokens"]), N)
    s, h, c2 = S.post("/v1/completions", dict(body, return_tokens_as_token_ids=True))
    lp2 = c2["choices"][0]["logprobs"]
    expect("completions logprobs: ids == generate", [int(t.split(":")[1]) for t in lp2["tokens"]], ref_ids["ids"])
    expect("completions logprobs: the same values as ids", lp2["token_logprobs"], lp["token_logprobs"])
    for i, (t, v, top) in enumerate(zip(lp2["tokens"], lp2["token_logprobs"], lp2["top_logprobs"])):
        best = max(top.items(), key=lambda kv: kv[1])
        if len(top) != K or best[0] != t or not close(best[1], v):
            fail(f"completions top_logprobs[{i}]: {top} ({t} {v})")
    offs, acc = [], 0
    for t in lp["tokens"]: offs.append(acc); acc += len(t)
    if ref_ids["text"].isprintable() and "\ufffd" not in "".join(lp["tokens"]):
        expect("completions text_offset", lp["text_offset"], offs)
    chunks = [json.loads(x) for x in S.sse("/v1/completions",
                                           dict(body, stream=True, return_tokens_as_token_ids=True))[:-1]]
    got = [tok for ch in chunks if ch["choices"][0]["logprobs"] for tok in ch["choices"][0]["logprobs"]["tokens"]]
    expect("completions stream: logprobs' tokens over the chunks", got, lp2["tokens"])
    body = {"model": "wide", "messages": chat_msgs[0], "max_tokens": N, "temperature": 0, "logprobs": True,
            "top_logprobs": K}
    s, h, ch = S.post("/v1/chat/completions", body)
    expect("chat logprobs: content unchanged", ch["choices"][0]["message"]["content"], ref_chat[0]["text"])
    cont = ch["choices"][0]["logprobs"]["content"]
    expect("chat logprobs: entries", len(cont), N)
    for i, e in enumerate(cont):
        if (len(e["top_logprobs"]) != K or e["top_logprobs"][0]["bytes"] != e["bytes"]
                or not close(e["top_logprobs"][0]["logprob"], e["logprob"])):
            fail(f"chat logprobs[{i}]: the first alternative is not the chosen token: {e}")
    expect("chat logprobs: bytes make the text", b"".join(bytes(e["bytes"]) for e in cont).decode(errors="replace"),
           ch["choices"][0]["message"]["content"])
    chunks = [json.loads(x) for x in S.sse("/v1/chat/completions", dict(body, stream=True))[:-1]]
    got = [e for c in chunks if c["choices"][0]["logprobs"] for e in c["choices"][0]["logprobs"]["content"]]
    expect("chat stream: logprobs over the chunks == the reply's", got, cont)
    s, h, ch0 = S.post("/v1/chat/completions", dict(body, top_logprobs=None))
    expect("chat logprobs without top_logprobs: none",
           [e["top_logprobs"] for e in ch0["choices"][0]["logprobs"]["content"]], [[]] * N)
    expect("chat logprobs (greedy on the backend) == with top_logprobs (on the host)",
           all(close(a["logprob"], b["logprob"]) for a, b in zip(ch0["choices"][0]["logprobs"]["content"], cont)), True)
    print(f"logprobs: TGI top_n_tokens {K}, completions logprobs {K} (prompt ids, token ids), chat top_logprobs {K}, "
          "streamed and not: the chosen token first, the backend's logprob, text and ids unchanged")
    # ---- the prompt's own logprobs: completions' echo (the prompt's text and tokens first), TGI's
    # decoder_input_details (details.prefill); each prompt token's dict == the alternatives of the first generated
    # token of a request over the prompt's tokens before it (the same rows' log-softmax), the prefix cache bypassed
    eb = {"model": "m", "prompt": texts[2], "max_tokens": N, "temperature": 0}
    s, h, plain = S.post("/v1/completions", eb)
    s, h, ec = S.post("/v1/completions", dict(eb, echo=True))
    expect("echo: prompt + completion", ec["choices"][0]["text"], texts[2] + plain["choices"][0]["text"])
    expect("echo without logprobs: null", ec["choices"][0]["logprobs"], None)
    s, h, el = S.post("/v1/completions", dict(eb, echo=True, logprobs=K, return_tokens_as_token_ids=True))
    L = el["choices"][0]["logprobs"]
    pids = [int(t.split(":")[1]) for t in L["tokens"]][:len(L["tokens"]) - N]
    P = len(pids)
    expect("echo logprobs: prompt tokens == usage's", P, el["usage"]["prompt_tokens"])
    expect("echo logprobs: the first is null", (L["token_logprobs"][0], L["top_logprobs"][0]), (None, None))
    s, h, gl = S.post("/v1/completions", dict(eb, logprobs=K, return_tokens_as_token_ids=True))
    expect("echo logprobs: the generated part == without echo", L["token_logprobs"][P:],
           gl["choices"][0]["logprobs"]["token_logprobs"])
    for t in (1, P // 2, P - 1):
        s, h, one = S.post("/v1/completions", {"prompt": pids[:t], "max_tokens": 1, "temperature": 0, "logprobs": K,
                                               "return_tokens_as_token_ids": True})
        d1 = one["choices"][0]["logprobs"]["top_logprobs"][0]
        top = sorted(d1.items(), key=lambda kv: -kv[1])[:K]
        mine = sorted(L["top_logprobs"][t].items(), key=lambda kv: -kv[1])
        want_t = f"token_id:{pids[t]}"
        if not all(k in L["top_logprobs"][t] and close(L["top_logprobs"][t][k], x) for k, x in top):
            fail(f"echo: prompt token {t}'s alternatives {mine} != the next-token ones of its prefix {top}")
        if want_t not in L["top_logprobs"][t] or not close(L["top_logprobs"][t][want_t], L["token_logprobs"][t]):
            fail(f"echo: prompt token {t}'s own logprob not in its dict: {L['token_logprobs'][t]} {mine}")
    s, h, el2 = S.post("/v1/completions", dict(eb, echo=True, logprobs=K, return_tokens_as_token_ids=True))
    expect("echo logprobs again (the prompt's blocks cached since): the same", el2["choices"][0]["logprobs"], L)
    chunks = [json.loads(x) for x in S.sse("/v1/completions", dict(eb, echo=True, logprobs=K, stream=True,
                                                                     return_tokens_as_token_ids=True))[:-1]]
    expect("echo stream: the first chunk is the prompt", chunks[0]["choices"][0]["text"], texts[2])
    expect("echo stream: the text", "".join(c["choices"][0]["text"] for c in chunks), ec["choices"][0]["text"])
    got = [v for c in chunks if c["choices"][0]["logprobs"] for v in c["choices"][0]["logprobs"]["token_logprobs"]]
    expect("echo stream: token_logprobs over the chunks == the reply's", got, L["token_logprobs"])
    got = [v for c in chunks if c["choices"][0]["logprobs"] for v in c["choices"][0]["logprobs"]["text_offset"]]
    expect("echo stream: text_offset over the chunks == the reply's", got, L["text_offset"])
    s, h, pf = S.post("/generate", {"inputs": texts[2], "parameters": {"max_new_tokens": N, "details": True,
                                                                      "decoder_input_details": True}})
    pre = pf["details"]["prefill"]
    expect("decoder_input_details: prefill ids", [x["id"] for x in pre], pids)
    expect("decoder_input_details: the first logprob null", pre[0]["logprob"], None)
    if not all(close(x["logprob"], v) for x, v in zip(pre[1:], L["token_logprobs"][1:P])):
        fail(f"decoder_input_details: prefill logprobs != echo's: {pre[:3]} {L['token_logprobs'][:3]}")
    expect("decoder_input_details: the generated text unchanged", pf["generated_text"], plain["choices"][0]["text"])
    s, h, pf0 = S.post("/generate", {"inputs": texts[2], "parameters": {"max_new_tokens": N, "details": True}})
    expect("details without decoder_input_details: prefill empty", pf0["details"]["prefill"], [])
    s, h, en = S.post("/v1/completions", dict(eb, echo=True, logprobs=1, n=2, return_tokens_as_token_ids=True))
    expect("echo with n = 2: each choice's prompt logprobs", [c["logprobs"]["token_logprobs"][:P] for c in en["choices"]],
           [L["token_logprobs"][:P]] * 2)
    s, h, z = S.post("/v1/completions", dict(eb, echo=True, logprobs=K, max_tokens=0, return_tokens_as_token_ids=True))
    expect("echo, max_tokens 0: the prompt alone", (s, z["choices"][0]["text"], z["choices"][0]["finish_reason"],
           z["usage"]["completion_tokens"]), (200, texts[2], "length", 0))
    expect("echo, max_tokens 0: the prompt's logprobs", z["choices"][0]["logprobs"]["token_logprobs"],
           L["token_logprobs"][:P])
    zc = [json.loads(x) for x in S.sse("/v1/completions", dict(eb, echo=True, logprobs=K, max_tokens=0, stream=True,
                                                                 return_tokens_as_token_ids=True))[:-1]]
    expect("echo, max_tokens 0, stream: the prompt, then the finish", ("".join(c["choices"][0]["text"] for c in zc),
           zc[-1]["choices"][0]["finish_reason"]), (texts[2], "length"))
    # vLLM's prompt_logprobs: [null, {ID: {logprob, rank, decoded_token}}]: the prompt token's values == echo's,
    # ranks 1..n for the alternatives, the token's rank 1 exactly where it is the most likely; chat's beside choices
    s, h, vq = S.post("/v1/completions", dict(eb, prompt_logprobs=2))
    pl = vq["choices"][0]["prompt_logprobs"]
    expect("prompt_logprobs: one entry a prompt token, the first null", (len(pl), pl[0]), (P, None))
    for t in range(1, P):
        e = pl[t][str(pids[t])]
        best = max(L["top_logprobs"][t].values())
        if not close(e["logprob"], L["token_logprobs"][t]) or (e["rank"] == 1) != close(e["logprob"], best) or \
                sorted(x["rank"] for k, x in pl[t].items() if k != str(pids[t]) or e["rank"] <= 2)[:2] != [1, 2]:
            fail(f"prompt_logprobs[{t}]: {pl[t]} (echo's {L['token_logprobs'][t]}, best {best})"); break
    expect("prompt_logprobs: the reply's text unchanged", vq["choices"][0]["text"], plain["choices"][0]["text"])
    s, h, vc = S.post("/v1/chat/completions", {"messages": chat_msgs[0], "max_tokens": 2, "temperature": 0,
                                               "prompt_logprobs": 0})
    expect("chat prompt_logprobs: beside the choices, one a prompt token", (s, len(vc.get("prompt_logprobs") or []),
           all(len(d) == 1 for d in vc["prompt_logprobs"][1:])), (200, vc["usage"]["prompt_tokens"], True))
    m = S.metrics()
    expect("echo, max_tokens 0: no row or block left held", (m["qwenft_batch_size"], m["qwenft_kv_blocks_used"]), (0, 0))
    print(f"prompt logprobs: echo ({P} prompt tokens) == the next-token logprobs of each prefix, streamed and not, "
          "again with the prompt cached, n = 2, max_tokens 0; TGI decoder_input_details and vLLM's prompt_logprobs "
          "(completions, chat) == echo's")
    # ---- n choices: each its own job over the prompt, seeds seed + index (vLLM's): choice k of a seeded sampled
    # request == generate --seed (seed + k); greedy choices all greedy's; streamed choices by index == the reply's
    sp = {"temperature": 0.8, "top_k": 40, "top_p": 0.9}
    samp3 = [samp[0]] + [generate([{"prompt": texts[0]}], N, "--temperature", "0.8", "--top-k", "40", "--top-p", "0.9",
                                  "--seed", str(7 + k))[0] for k in (1, 2)]
    s, h, b = S.post("/v1/completions", dict(sp, model="wide", prompt=texts[0], max_tokens=N, n=3, seed=7))
    expect("n = 3: choices by index", [c["index"] for c in b["choices"]], [0, 1, 2])
    for k in range(3):
        if samp3[k]["finish"] == "length":
            expect(f"n = 3, seed 7: choice {k} == generate --seed {7 + k}", b["choices"][k]["text"], samp3[k]["text"])
    expect("n = 3: usage counts every choice's tokens", b["usage"]["completion_tokens"], sum(len(x["ids"]) for x in samp3))
    if len({c["text"] for c in b["choices"]}) < 2: fail(f"n = 3 sampled: the choices are all the same: {b['choices']}")
    s, h, b = S.post("/v1/chat/completions", {"model": "wide", "messages": chat_msgs[0], "max_tokens": N,
                                              "temperature": 0, "n": 2})
    expect("n = 2 greedy chat: both == generate --chat", [c["message"]["content"] for c in b["choices"]],
           [ref_chat[0]["text"]] * 2)
    chunks = [json.loads(x) for x in S.sse("/v1/completions", dict(sp, model="wide", prompt=texts[0], max_tokens=N, n=3,
                                                                   seed=7, stream=True,
                                                                   stream_options={"include_usage": True}))[:-1]]
    per = {}
    for c in chunks[:-1]: per[c["choices"][0]["index"]] = per.get(c["choices"][0]["index"], "") + c["choices"][0]["text"]
    expect("n = 3 streamed: each index's text == generate --seed (7 + index)",
           [per.get(k) for k in range(3)], [x["text"] for x in samp3])
    expect("n = 3 streamed: one usage chunk at the end", (chunks[-1]["choices"], chunks[-1]["usage"]["completion_tokens"]),
           ([], sum(len(x["ids"]) for x in samp3)))
    # the choices after the first wait for its prompt's blocks and share them (the prefix cache): a prompt of 3+
    # blocks not seen before, n = 4: the other 3 take exactly its full blocks from the cache (without the wait: none);
    # every choice == greedy
    p4 = "purple zebra crossing seven rivers " * 5
    h0 = S.metrics()["qwenft_prefix_cache_hit_tokens_total"]
    s, h, b = S.post("/v1/completions", {"model": "wide", "prompt": p4, "max_tokens": 8, "temperature": 0, "n": 4})
    hits, plen4 = S.metrics()["qwenft_prefix_cache_hit_tokens_total"] - h0, b["usage"]["prompt_tokens"]
    expect("n = 4 greedy: all the same", len({c["text"] for c in b["choices"]}), 1)
    if hits != 3 * ((plen4 - 1) // 16) * 16 or hits < 3 * 32:
        fail(f"n = 4 over a {plen4}-token prompt: {hits} tokens from the cache, expected 3 x its full blocks")
    print(f"n: 3 seeded sampled choices == generate --seed 7, 8, 9 (streamed and not), 2 greedy chat choices == greedy; "
          f"n = 4 over a {plen4}-token prompt: the other 3 took {hits} of its tokens from the cache")
    # best_of: the candidates are n = best_of's choices (seeds 7, 8, 9); the best by mean logprob per token returned,
    # best first, indexed 0..; usage counts every candidate's tokens
    s, h, all3 = S.post("/v1/completions", dict(sp, model="wide", prompt=texts[0], max_tokens=N, n=3, seed=7, logprobs=0))
    mean = [sum(c["logprobs"]["token_logprobs"]) / max(1, len(c["logprobs"]["token_logprobs"])) for c in all3["choices"]]
    rank = sorted(range(3), key=lambda k: (-mean[k], k))
    for n_ in (1, 2):
        s, h, b = S.post("/v1/completions", dict(sp, model="wide", prompt=texts[0], max_tokens=N, n=n_, best_of=3, seed=7))
        expect(f"best_of 3, n {n_}: the best by mean logprob, best first",
               [(c["index"], c["text"], c["logprobs"]) for c in b["choices"]],
               [(i, all3["choices"][rank[i]]["text"], None) for i in range(n_)])
        expect(f"best_of 3, n {n_}: usage counts every candidate", b["usage"]["completion_tokens"],
               all3["usage"]["completion_tokens"])
    if len({round(m, 6) for m in mean}) < 2: fail(f"best_of: the 3 candidates score alike: {mean}")
    s, h, b = S.post("/generate", {"inputs": texts[0], "parameters": {"max_new_tokens": N, "best_of": 3, "do_sample": True,
                                                                      "details": True}})
    d = b.get("details", {}) if s == 200 else {}
    seqs = [d] + d.get("best_of_sequences", [])
    tm = [sum(t["logprob"] for t in x.get("tokens", [])) / max(1, len(x.get("tokens", []))) for x in seqs]
    expect("TGI best_of 3: 2 others in details.best_of_sequences, each with its text, seed and tokens",
           (s, len(seqs), all("generated_text" in x and "seed" in x and "tokens" in x for x in seqs[1:])), (200, 3, True))
    if s == 200 and (tm != sorted(tm, reverse=True) or b["generated_text"] != seqs[0].get("generated_text", b["generated_text"])):
        fail(f"TGI best_of 3: not best first by mean logprob: {tm}")
    s, h, b = S.post("/generate", {"inputs": texts[0], "parameters": {"max_new_tokens": 4, "best_of": 2, "do_sample": True}})
    expect("TGI best_of 2 without details: the text alone", (s, sorted(b)), (200, ["generated_text"]))
    print(f"best_of: 3 candidates (means {[round(m, 3) for m in mean]}): n 1 and 2 return the best first; TGI's "
          f"best_of_sequences best first")
    # ---- malformed requests ---------------------------------------------------------------------------------------
    long_prompt = "data " * 200
    cases = [("/generate", b"{not json", ""), ("/generate", b"[1, 2]", ""), ("/generate", {"inputs": 5}, "inputs"),
             ("/generate", {"parameters": {}}, "inputs"), ("/generate", {"inputs": ""}, "inputs"),
             ("/generate", {"inputs": "a", "parameters": {"max_new_tokens": "x"}}, "parameters.max_new_tokens"),
             ("/generate", {"inputs": "a", "parameters": {"max_new_tokens": 0}}, "parameters.max_new_tokens"),
             ("/generate", {"inputs": "a", "parameters": {"max_new_tokens": 10000}}, "parameters.max_new_tokens"),
             ("/generate", {"inputs": "data " * 40, "parameters": {"max_new_tokens": 250}}, "parameters.max_new_tokens"),
             ("/generate", {"inputs": long_prompt, "parameters": {"max_new_tokens": 2}}, "inputs"),
             ("/generate", {"inputs": "a", "parameters": {"temperature": 0}}, "parameters.temperature"),
             ("/generate", {"inputs": "a", "parameters": {"temperature": "hot"}}, "parameters.temperature"),
             ("/generate", {"inputs": "a", "parameters": {"top_p": 1.5}}, "parameters.top_p"),
             ("/generate", {"inputs": "a", "parameters": {"top_k": -3}}, "parameters.top_k"),
             ("/generate", {"inputs": "a", "parameters": {"do_sample": "yes"}}, "parameters.do_sample"),
             ("/generate", {"inputs": "a", "parameters": {"stop": "x"}}, "parameters.stop"),
             ("/generate", {"inputs": "a", "parameters": {"stop": ["a", "b", "c", "d", "e"]}}, "parameters.stop"),
             ("/generate", {"inputs": "a", "parameters": {"frobnicate": 1}}, "parameters.frobnicate"),
             ("/generate", {"inputs": "a", "parameters": {"watermark": True}}, "parameters.watermark"),
             ("/generate", {"inputs": "a", "parameters": {"frequency_penalty": 3}}, "parameters.frequency_penalty"),
             ("/generate", {"inputs": "a", "parameters": {"typical_p": 1.0}}, "parameters.typical_p"),
             ("/generate", {"inputs": "a", "parameters": {"truncate": 0}}, "parameters.truncate"),
             ("/generate", {"inputs": "a", "parameters": {"truncate": 1000}}, "parameters.truncate"),
             ("/v1/completions", {"prompt": "a", "presence_penalty": -2.5}, "presence_penalty"),
             ("/v1/completions", {"prompt": "a", "frequency_penalty": "x"}, "frequency_penalty"),
             ("/v1/completions", {"prompt": "a", "min_p": 1.5}, "min_p"),
             ("/v1/completions", {"prompt": "a", "logit_bias": {"abc": 1}}, "logit_bias"),
             ("/v1/completions", {"prompt": "a", "logit_bias": {"5": 101}}, "logit_bias"),
             ("/v1/completions", {"prompt": "a", "logit_bias": {"999999999": 1}}, "logit_bias"),
             ("/v1/completions", {"prompt": "a", "logit_bias": [1]}, "logit_bias"),
             ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"-1": 5}},
              "logit_bias"),
             ("/v1/completions", {"prompt": "a", "response_format": {"type": "json_schema", "json_schema": {}}},
              "response_format"),
             ("/v1/completions", {"prompt": "a", "response_format": {"type": 5}}, "response_format"),
             ("/v1/completions", {"prompt": "a", "ignore_eos": "yes"}, "ignore_eos"),
             ("/v1/completions", {"prompt": "a", "min_tokens": -1}, "min_tokens"),
             ("/v1/completions", {"prompt": "a", "min_tokens": 100000}, "min_tokens"),
             ("/v1/completions", {"prompt": "a", "response_format": "json"}, "response_format"),
             ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                       "response_format": {"type": "json_object", "strict": True}}, "response_format"),
             ("/generate", {"inputs": "a", "parameters": 3}, "parameters"),
             ("/generate", {"inputs": "a", "extra": 1}, "extra"),
             ("/generate_stream", {"inputs": 1.5}, "inputs"),
             ("/v1/completions", {"model": "m"}, "prompt"), ("/v1/completions", {"prompt": ["a", "b"]}, "prompt"),
             ("/v1/completions", {"prompt": "a", "max_tokens": 100000}, "max_tokens"),
             ("/v1/completions", {"prompt": "a", "temperature": 3}, "temperature"),
             ("/v1/completions", {"prompt": "a", "n": 17}, "n"),
             ("/v1/completions", {"prompt": "a", "n": 3, "best_of": 2}, "best_of"),
             ("/v1/completions", {"prompt": "a", "best_of": 17}, "best_of"),
             ("/v1/completions", {"prompt": "a", "best_of": 2, "stream": True}, "best_of"),
             ("/v1/chat/completions", {"messages": [{"role": "user", "content": "a"}], "best_of": 2}, "best_of"),
             ("/generate", {"inputs": "a", "parameters": {"best_of": 2}}, "parameters.best_of"),
             ("/generate", {"inputs": "a", "parameters": {"best_of": 2, "do_sample": True, "seed": 1}}, "parameters.seed"),
             ("/generate", {"inputs": "a", "parameters": {"best_of": "2"}}, "parameters.best_of"),
             ("/generate_stream", {"inputs": "a", "parameters": {"best_of": 2, "do_sample": True}}, "parameters.best_of"),
             ("/v1/completions", {"prompt": "a", "stream": 1}, "stream"),
             ("/v1/completions", {"prompt": "a", "unknown_field": 1}, "unknown_field"),
             ("/v1/completions", {"prompt": long_prompt}, "prompt"),
             ("/v1/completions", {"prompt": [1, -2]}, "prompt"), ("/v1/completions", {"prompt": []}, "prompt"),
             ("/v1/completions", {"prompt": [[1, 2], [3]]}, "prompt"),
             ("/v1/completions", {"prompt": [5, 1.5]}, "prompt"),
             ("/v1/completions", {"prompt": [1, 10 ** 6]}, "prompt"),
             ("/v1/completions", {"prompt": "a", "logprobs": True}, "logprobs"),
             ("/v1/completions", {"prompt": "a", "echo": 1}, "echo"),
             ("/v1/completions", {"prompt": "a", "max_tokens": 0}, "max_tokens"),
             ("/v1/completions", {"prompt": "a", "prompt_logprobs": 21}, "prompt_logprobs"),
             ("/v1/completions", {"prompt": "a", "prompt_logprobs": 1, "stream": True}, "prompt_logprobs"),
             ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}, "max_tokens"),
             ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "echo": True}, "echo"),
             ("/generate", {"inputs": "a", "parameters": {"decoder_input_details": "yes"}},
              "parameters.decoder_input_details"),
             ("/generate_stream", {"inputs": "a", "parameters": {"decoder_input_details": True}},
              "parameters.decoder_input_details"),
             ("/v1/completions", {"prompt": "a", "logprobs": 21}, "logprobs"),
             ("/v1/completions", {"prompt": "a", "return_tokens_as_token_ids": 1}, "return_tokens_as_token_ids"),
             ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "logprobs": 1}, "logprobs"),
             ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2},
              "top_logprobs"),
             ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "logprobs": True,
                                       "top_logprobs": 21}, "top_logprobs"),
             ("/generate", {"inputs": "a", "parameters": {"top_n_tokens": 6}}, "parameters.top_n_tokens"),
             ("/v1/chat/completions", {"model": "m"}, "messages"),
             ("/v1/chat/completions", {"messages": "hi"}, "messages"),
             ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "hi"}]}, "messages"),
             ("/v1/chat/completions", {"messages": [{"role": "user"}]}, "messages"),
             ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": "3"},
              "max_completion_tokens"),
             ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}], "stop": 5}, "stop"),
             ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                       "chat_template_kwargs": {"enable_thinking": "no"}}, "chat_template_kwargs.enable_thinking"),
             ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}],
                                       "chat_template_kwargs": {"add_vision_id": True}}, "chat_template_kwargs")]
    for path, body, field in cases:
        s, h, b = S.req("POST", path, raw=body if isinstance(body, bytes) else json.dumps(body).encode())
        try: err = json.loads(b)
        except ValueError: fail(f"{path} {body!r}: not JSON: {b[:200]!r}"); continue
        if s != 400: fail(f"{path} {body!r}: status {s}, expected 400: {err}"); continue
        oai = path.startswith("/v1/")
        got_field = (err["error"].get("param") or "") if oai else (err.get("field") or "")
        msg = err["error"]["message"] if oai else err["error"]
        if got_field != field: fail(f"{path} {body!r}: field {got_field!r}, expected {field!r} ({msg})")
        if field and field.split(".")[-1] not in msg: fail(f"{path} {body!r}: the message should name {field}: {msg}")
        if not oai and err.get("error_type") != "validation": fail(f"{path}: error_type {err.get('error_type')}")
    s, h, b = S.req("POST", "/v1/chat/completions", raw=json.dumps({"messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 2, "chat_template_kwargs": {"enable_thinking": False}}).encode())
    expect("chat_template_kwargs.enable_thinking = false is accepted", s, 200)
    so = socket.create_connection(("127.0.0.1", S.port))  # the cap is checked on Content-Length, before the body
    so.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
               + str(1100 * 1024).encode() + b"\r\n\r\n" + b'{"inputs": "' + b"a" * 1000)
    reply = so.recv(4096).decode(errors="replace"); so.close()
    expect("a body over --max-body-kb: 413", reply.split(" ")[1] if " " in reply else reply, "413")
    expect("GET /generate: 405", S.req("GET", "/generate")[0], 405)
    expect("POST /health: 405", S.req("POST", "/health", raw=b"{}")[0], 405)
    expect("unknown path: 404", S.req("GET", "/nope")[0], 404)
    print(f"malformed: {len(cases)} bad bodies are 400 naming the field; 413, 404, 405")
    # ---- disconnect mid-stream ------------------------------------------------------------------------------------
    early = False
    for attempt in range(3):
        before = S.metrics()["qwenft_generation_tokens_total"]
        so = socket.create_connection(("127.0.0.1", S.port))
        body = json.dumps({"inputs": "a", "parameters": {"max_new_tokens": 250}}).encode()
        so.sendall(b"POST /generate_stream HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                   + str(len(body)).encode() + b"\r\n\r\n" + body)
        got = b""
        while b"data: " not in got: got += so.recv(4096)  # the first event
        so.close()
        t0 = time.time()
        while time.time() - t0 < 10 and S.metrics()["qwenft_batch_size"] > 0: time.sleep(0.02)
        m = S.metrics()
        if m["qwenft_batch_size"] != 0 or m["qwenft_kv_blocks_used"] != 0:
            fail(f"after a disconnect the batch still holds {m['qwenft_batch_size']} rows, {m['qwenft_kv_blocks_used']} blocks")
        if m["qwenft_generation_tokens_total"] - before < 250: early = True; break
    if not early: fail("a client that hung up after its first event still got all 250 tokens generated (3 tries)")
    else: print(f"disconnect: cancelled after {int(m['qwenft_generation_tokens_total'] - before)} of 250 tokens; slot and blocks freed")
    # a client waiting for a whole reply that hangs up: cancelled too (a peek at each step sees the EOF)
    early = False
    for attempt in range(3):
        before = S.metrics()["qwenft_generation_tokens_total"]
        so = socket.create_connection(("127.0.0.1", S.port))
        body = json.dumps({"inputs": "a", "parameters": {"max_new_tokens": 250}}).encode()
        so.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
                   + str(len(body)).encode() + b"\r\n\r\n" + body)
        so.close()
        time.sleep(0.3)  # admitted by now, cancelled or done
        t0 = time.time()
        while time.time() - t0 < 10 and S.metrics()["qwenft_batch_size"] > 0: time.sleep(0.02)
        m = S.metrics()
        if m["qwenft_batch_size"] != 0: fail("after a non-streaming disconnect the batch still holds a row")
        if m["qwenft_generation_tokens_total"] - before < 250: early = True; break
    if not early: fail("a non-streaming client that hung up still got all 250 tokens generated (3 tries)")
    else: print(f"disconnect (whole reply): cancelled after {int(m['qwenft_generation_tokens_total'] - before)} of 250 tokens")
    # ---- info, models, metrics ------------------------------------------------------------------------------------
    s, h, info = S.post("/info", None) if False else (None, None, json.loads(S.req("GET", "/info")[2]))
    expect("/info limits", (info["max_input_tokens"], info["max_total_tokens"], info["max_batch_size"]), (128, 256, 3))
    models = json.loads(S.req("GET", "/v1/models")[2])
    expect("/v1/models", (models["object"], models["data"][0]["id"], models["data"][0]["object"]), ("list", "wide", "model"))
    m = S.metrics()
    if m.get('qwenft_requests_total{endpoint="/generate",status="2xx"}', 0) < 3 * len(texts) + 4: fail(f"/generate 2xx count: {m}")
    if m.get('qwenft_requests_total{endpoint="/generate",status="400"}', 0) < 15: fail("/generate 400 count")
    if m["qwenft_time_to_first_token_seconds_count"] < 30: fail("ttft histogram count")
    if m['qwenft_time_per_output_token_seconds_bucket{le="+Inf"}'] != m["qwenft_time_per_output_token_seconds_count"]: fail("tpot +Inf bucket")
    if m["qwenft_kv_blocks_total"] != 3 * 16: fail(f"kv blocks total {m['qwenft_kv_blocks_total']} (3 rows x 256 / 16)")
    if m["qwenft_prompt_tokens_total"] <= 0 or m["qwenft_generation_tokens_total"] < 40 * N: fail("token counters")
    print("info, models, metrics: as served")
finally:
    rc = S.stop()
expect("first server: exit after SIGTERM", rc, 0)
n = ahead_counts("serve.err")
if not n or n[1] < n[0] // 2: fail(f"decode ahead on: calls queued ahead (of all calls): {n}")
else: print(f"decode ahead on: {n[1]} of {n[0]} model calls queued before the previous call's picks were read")

# ---- the prefix cache under pressure: a pool of 2 requests' blocks (20), 3 shared starts x 4 endings, each sent
# twice at once: blocks are shared, released, kept and evicted while others hold them; every reply == generate -----
S = Server(q, "--model", "wide", "--max-batch", "2", "--max-queue", "64", "--prefill-chunk", "8",
           "--max-total-tokens", "160", "--max-input-tokens", "128", log="serve4.err")
try:
    starts = ["the quick brown fox jumps over the lazy dog " * 3, "hello there, general kenobi. " * 4, "data " * 40]
    ends = ["one", "two three", "zebra", "x y z w"]
    ptexts = [a + b for a in starts for b in ends]
    pref = generate([{"prompt": t} for t in ptexts], 16)
    pres = {}
    def pworker(k, i):
        s, h, b = S.post("/generate", {"inputs": ptexts[i], "parameters": {"max_new_tokens": 16, "details": True}})
        pres[k] = [t["id"] for t in b["details"]["tokens"]] if s == 200 else (s, b)
    jobs = [(f"{r}-{i}", i) for r in range(2) for i in range(len(ptexts))]
    th = [threading.Thread(target=pworker, args=j) for j in jobs]
    for t in th: t.start()
    for t in th: t.join()
    for k, i in jobs: expect(f"prefix cache under pressure: {k} ids == generate", pres[k], pref[i]["ids"])
    m = S.metrics()
    if m["qwenft_kv_blocks_used"] != 0: fail(f"prefix cache under pressure: {m['qwenft_kv_blocks_used']} blocks left held")
    if m["qwenft_prefix_cache_hit_tokens_total"] < 16 * len(jobs): fail(f"prefix cache under pressure: only {m['qwenft_prefix_cache_hit_tokens_total']} tokens from the cache")
    print(f"prefix cache under pressure: {len(jobs)} requests over a pool of {int(m['qwenft_kv_blocks_total'])} blocks "
          f"== generate; {int(m['qwenft_prefix_cache_hit_tokens_total'])} prompt tokens from the cache")
finally:
    expect("fourth server: exit after SIGTERM", S.stop(), 0)

# ---- preemption: a pool of 20 blocks (--max-batch-total-tokens 320) for 4 running requests that grow to 6-8
# blocks each: the newest running request gives its blocks back and is recomputed later (its prompt and tokens so
# far, from the prefix cache where it still holds them); greedy and seeded sampled replies == generate; with
# --prefix-cache and --decode-ahead off (everything recomputed, no call ahead) too; --preemption off: none ----------
pre_texts = ["the quick brown fox jumps over the lazy dog " * 2, "hello there, general kenobi. " * 3, "data " * 30,
             "one two three four five six seven", "zebra " * 12, "a b c d e f g h i j k l m n o p", "x", "lorem ipsum " * 5]
pre_new = 80
pre_ref = generate([{"prompt": t} for t in pre_texts], pre_new)
samp_args = ["--temperature", "0.8", "--top-k", "40", "--top-p", "0.9"]
pre_samp = generate([{"prompt": pre_texts[1]}], pre_new, *samp_args, "--seed", "11")
def pre_round(S, what, samp_ids=None):
    res = {}
    def w(k, i, sampled):
        par = {"max_new_tokens": pre_new, "details": True, "stop": None}
        if sampled: par.update({"do_sample": True, "temperature": 0.8, "top_k": 40, "top_p": 0.9, "seed": 11})
        s, h, b = S.post("/generate", {"inputs": pre_texts[i], "parameters": par})
        res[k] = [t["id"] for t in b["details"]["tokens"]] if s == 200 else (s, b)
    jobs = [(f"g{i}", i, False) for i in range(len(pre_texts))] + [("s0", 1, True), ("s1", 1, True)]
    jobs[3:3] = [jobs.pop()]  # a sampled one among the first to be admitted
    th = [threading.Thread(target=w, args=j) for j in jobs]
    for t in th: t.start()
    for t in th: t.join()
    for k, i, sampled in jobs:
        expect(f"{what}: {k} ids == " + ("generate --seed 11" if sampled and samp_ids is None else
                                          "the seeded request alone" if sampled else "generate"), res[k],
               (pre_samp[0]["ids"] if samp_ids is None else samp_ids) if sampled else pre_ref[i]["ids"])
    m = S.metrics()
    if m["qwenft_kv_blocks_used"] != 0: fail(f"{what}: {m['qwenft_kv_blocks_used']} blocks left held")
    return m
pre_common = ["--model", "wide", "--max-batch", "4", "--max-queue", "64", "--prefill-chunk", "8",
              "--max-total-tokens", "160", "--max-input-tokens", "96", "--max-batch-total-tokens", "320"]
for extra, log in (([], "serve5.err"), (["--prefix-cache", "off", "--decode-ahead", "off"], "serve6.err")):
    S = Server(q, *pre_common, *extra, log=log)
    what = "preemption" + (" (prefix cache, decode ahead off)" if extra else "")
    try:
        if "preemption: on (" not in open(log).read(): fail(f"{what}: no 'preemption: on' in the start-up log")
        bad0 = bad
        for attempt in range(3):  # the requests overlap enough to preempt (the first round does, as a rule)
            m = pre_round(S, what)
            npre, rec = m["qwenft_preemptions_total"], m["qwenft_recomputed_tokens_total"]
            if npre: break
        if m["qwenft_kv_blocks_total"] != 20: fail(f"{what}: pool of {m['qwenft_kv_blocks_total']} blocks, not 20")
        if npre < 1 or rec < 1: fail(f"{what}: {npre} preemptions, {rec} positions recomputed: none happened")
        if extra and m["qwenft_prefix_cache_hit_tokens_total"]: fail(f"{what}: prefix cache hits with it off")
        if bad == bad0:
            print(f"{what}: {len(pre_texts) + 2} requests over 20 blocks: {int(npre)} preemptions, {int(rec)} "
                  "positions recomputed, every reply == generate")
    finally:
        expect(f"{what}: exit after SIGTERM", S.stop(), 0)
    if f"{int(npre)} preemptions, {int(rec)} positions recomputed" not in open(log).read():
        fail(f"{what}: the stop line does not count them")
S = Server(q, *pre_common, "--preemption", "off", log="serve7.err")
try:
    if "preemption: off (" not in open("serve7.err").read(): fail("--preemption off: not in the start-up log")
    m = pre_round(S, "preemption off")
    if m["qwenft_preemptions_total"] or m["qwenft_recomputed_tokens_total"]: fail(f"--preemption off: {m}")
    else: print("preemption off: every request holds its whole budget, none preempted, the same replies")
finally:
    expect("preemption off: exit after SIGTERM", S.stop(), 0)

# ---- speculation (--speculate 4): every decoding request gets draft tokens (the chain of proposals: what followed
# the latest earlier occurrence of its last tokens) as extra rows, kept while the picks confirm them: greedy replies'
# ids and logprobs == a server without it (one request at a time) in exactly the calls the accepted drafts save,
# every greedy reply of the parity mix == generate; a seeded sampled request (each token drawn from its own stream
# with its position's proposal first) gives the same tokens alone, in the parity mix and at --speculate 2 with the
# preemption pool of 20 blocks (drafts take free blocks only) ---------------------------------------------------
spec_texts = ["data " * 30, "the quick brown fox", "one two three four five six", "x y", "zebra " * 12]
spec_new = 48
samp_par = {"do_sample": True, "temperature": 0.8, "top_k": 40, "top_p": 0.9}
def spec_details(S):
    out = {}
    def w(i):
        s, h, b = S.post("/generate", {"inputs": spec_texts[i], "parameters": {"max_new_tokens": spec_new,
                                                                               "details": True, "stop": None}})
        out[i] = [(t["id"], t["logprob"]) for t in b["details"]["tokens"]] if s == 200 else (s, b)
    return w, out
def seeded(S, text, n, seed, **par):
    s, h, b = S.post("/generate", {"inputs": text, "parameters": dict(samp_par, max_new_tokens=n, details=True,
                                                                      seed=seed, stop=None, **par)})
    return [t["id"] for t in b["details"]["tokens"]] if s == 200 else (s, b)
S = Server(q, "--model", "wide", "--max-batch", "3", "--max-queue", "64", "--prefill-chunk", "8",
           "--max-total-tokens", "256", "--max-input-tokens", "128", log="serve8.err")
try:
    w, spec_ref = spec_details(S)
    c0 = S.metrics()["qwenft_engine_steps_total"]
    for i in range(len(spec_texts)): w(i)
    calls_ref = S.metrics()["qwenft_engine_steps_total"] - c0
finally:
    expect("speculation's reference server: exit after SIGTERM", S.stop(), 0)
S = Server(q, "--model", "wide", "--max-batch", "3", "--max-queue", "64", "--prefill-chunk", "8",
           "--max-total-tokens", "256", "--max-input-tokens", "128", "--speculate", "4", log="serve9.err")
try:
    log = open("serve9.err").read()
    if "speculation: up to 4 draft tokens" not in log: fail("--speculate 4: not in the start-up log")
    if "decode ahead: off (--speculate" not in log: fail("--speculate 4: decode ahead not off in the start-up log")
    w, spec_out = spec_details(S)
    m0 = S.metrics()
    for i in range(len(spec_texts)): w(i)  # one at a time: batch 1, every head row but the sequence's own a draft
    m1 = S.metrics()
    for i in range(len(spec_texts)):
        expect(f"speculation: prompt {i} ids and logprobs == the server without it", spec_out[i], spec_ref[i])
    gen = sum(len(v) for v in spec_out.values() if isinstance(v, list))
    calls = m1["qwenft_engine_steps_total"] - m0["qwenft_engine_steps_total"]
    nd, na = m1["qwenft_spec_draft_tokens_total"], m1["qwenft_spec_accepted_tokens_total"]
    if not (0 < na <= nd): fail(f"speculation: {nd} drafts fed, {na} accepted")
    # each accepted draft is a token without a call of its own: the prefill's calls stay, the decoding's shrink
    if calls != calls_ref - na: fail(f"speculation: {calls} calls for {gen} tokens, {na} drafts accepted; {calls_ref} without")
    print(f"speculation, one at a time: {gen} tokens in {int(calls)} model calls against {int(calls_ref)} without it; "
          f"{int(nd)} drafts fed, {int(na)} accepted; ids and logprobs == the server without it")
    # sampled: alone (drafts in every call), then in the parity mix (batch <= 3: fewer or no drafts) and below
    a0 = S.metrics()["qwenft_spec_accepted_tokens_total"]
    spec_samp = seeded(S, texts[0], N, 7)
    spec_samp11 = seeded(S, pre_texts[1], pre_new, 11)
    cold = seeded(S, "data " * 30, 40, 3, temperature=0.02)  # the tiny model's logits are close: near greedy
    acc_s = S.metrics()["qwenft_spec_accepted_tokens_total"] - a0
    if not isinstance(spec_samp, list) or not isinstance(cold, list): fail(f"speculation, sampled: {spec_samp} {cold}")
    if acc_s < 1: fail("speculation: no draft of a sampled request accepted")
    parity(S, ref, ref_chat, [{"ids": spec_samp}], texts, chat_msgs, N, "speculation")
    expect("speculation: the seeded request again, alone", seeded(S, texts[0], N, 7), spec_samp)
    print(f"speculation, sampled: {int(acc_s)} drafts of seeded sampled requests accepted; the same tokens alone and "
          "among the parity mix")
    if S.metrics()["qwenft_kv_blocks_used"] != 0: fail("speculation: blocks left held")
finally:
    expect("speculation: exit after SIGTERM", S.stop(), 0)
m = __import__("re").search(r"speculation: (\d+) draft tokens fed, (\d+) accepted", open("serve9.err").read())
if not m or int(m.group(2)) < na: fail("speculation: the stop line does not count the drafts")
S = Server(q, *pre_common, "--speculate", "2", log="serve10.err")
try:
    pre_round(S, "preemption with --speculate 2", samp_ids=spec_samp11)
    m = S.metrics()
    print(f"preemption with --speculate 2: {len(pre_texts) + 2} requests over 20 blocks == generate, the seeded ones == "
          f"--speculate 4's alone ({int(m['qwenft_preemptions_total'])} preemptions, "
          f"{int(m['qwenft_spec_accepted_tokens_total'])} drafts accepted)")
finally:
    expect("preemption with speculation: exit after SIGTERM", S.stop(), 0)

# ---- --decode-ahead off: every call's picks read before the next is built; the same replies ---------------------
S = Server(q, "--model", "wide", "--max-batch", "3", "--max-queue", "64", "--prefill-chunk", "8",
           "--max-total-tokens", "256", "--max-input-tokens", "128", "--decode-ahead", "off", "--prefix-cache", "off",
           log="serve3.err")
if "decode ahead: off (--decode-ahead off)" not in open("serve3.err").read(): fail("--decode-ahead off: not in the log")
if "prefix cache: off (--prefix-cache off)" not in open("serve3.err").read(): fail("--prefix-cache off: not in the log")
try:
    parity(S, ref, ref_chat, samp, texts, chat_msgs, N, "decode ahead off, prefix cache off")
    # ---- penalties and biases (on this server: their picks are the host's, which would lower the first server's
    # share of calls queued ahead): OpenAI's logit_bias, frequency_penalty and presence_penalty, vLLM's min_p, TGI's
    # frequency_penalty (an id's share of all tokens), typical_p and truncate. A greedy pick under penalties is the
    # argmax of the raw logprobs (the reported top alternatives) less the penalties restated; a step is checked where
    # the winner is certain (ahead of the runner-up and of the smallest reported alternative, which bounds every id
    # not reported, by more than 1e-4) ------------------------------------------------------------------------------
    pids = ids[:6]
    def cmpl_ids(**kw):
        body = {"model": "wide", "prompt": pids, "max_tokens": 24, "temperature": 0, "logprobs": 20,
                "return_tokens_as_token_ids": True, **kw}
        s, h, c = S.post("/v1/completions", body)
        if s != 200: fail(f"completions {kw}: {s} {c}"); return [], []
        L = c["choices"][0]["logprobs"]
        return ([int(t.split(":")[1]) for t in L["tokens"]],
                [{int(k.split(":")[1]): v for k, v in d.items()} for d in L["top_logprobs"]])
    def check_pen(name, got, tops, pen_of, need):
        checked = 0
        for i, (t, top) in enumerate(zip(got, tops)):
            vals = sorted(((v - pen_of(k, i), -k) for k, v in top.items()), reverse=True)
            if vals[0][0] > max(vals[1][0], min(top.values())) + 1e-4:
                checked += 1
                if t != -vals[0][1]: fail(f"{name}: step {i}: picked {t}, the penalised argmax is {-vals[0][1]}")
        if checked < need: fail(f"{name}: only {checked} of {len(got)} steps certain (need {need})")
        return checked
    plain, _ = cmpl_ids()
    forced, _ = cmpl_ids(logit_bias={"1000": 100})
    expect("logit_bias +100: every token that id", forced, [1000] * 24)
    banned, _ = cmpl_ids(logit_bias={str(plain[0]): -100})
    if not banned or banned[0] == plain[0]: fail(f"logit_bias -100 on the greedy first token {plain[0]}: {banned[:1]}")
    got, tops = cmpl_ids(frequency_penalty=0.05, presence_penalty=0.02)
    n_oai = check_pen("OpenAI penalties", got, tops,
                      lambda k, i: 0.05 * got[:i].count(k) + (0.02 if k in got[:i] else 0), 12)
    if got == plain: fail("frequency/presence penalties: the reply is the unpenalised one")
    s, h, b = S.post("/generate", {"inputs": texts[2], "parameters": {"max_new_tokens": 24, "details": True,
                     "decoder_input_details": True, "top_n_tokens": 5, "frequency_penalty": 0.5, "stop": None}})
    pre_ids = [t["id"] for t in b["details"]["prefill"]]
    tg = [t["id"] for t in b["details"]["tokens"]]
    ttops = [{a["id"]: a["logprob"] for a in tt} for tt in b["details"]["top_tokens"]]
    allt = pre_ids + tg
    n_tgi = check_pen("TGI frequency_penalty", tg, ttops,
                      lambda k, i: 0.5 * allt[:len(pre_ids) + i].count(k) / (len(pre_ids) + i), 6)
    samp_min, _ = cmpl_ids(temperature=1.0, seed=5, min_p=1.0)
    expect("min_p 1: sampling keeps only the likeliest: == greedy", samp_min, plain)
    s, h, b = S.post("/generate", {"inputs": texts[2], "parameters": {"max_new_tokens": 8, "typical_p": 0.5,
                                                                      "seed": 3, "details": True}})
    s2, h2, b2 = S.post("/generate", {"inputs": texts[2], "parameters": {"max_new_tokens": 8, "typical_p": 0.5,
                                                                        "seed": 3, "details": True}})
    if s != 200 or b != b2: fail(f"typical_p 0.5, seed 3: {s} {b} / {b2}")
    full = "the model was trained on large amounts of data, and it " * 3
    s, h, b = S.post("/generate", {"inputs": full, "parameters": {"max_new_tokens": 8, "details": True,
                                                                  "decoder_input_details": True, "stop": None}})
    s, h, bt = S.post("/generate", {"inputs": full, "parameters": {"max_new_tokens": 8, "details": True, "truncate": 7,
                                                                   "decoder_input_details": True, "stop": None}})
    fid, tid = [t["id"] for t in b["details"]["prefill"]], [t["id"] for t in bt["details"]["prefill"]]
    expect("truncate 7: the prompt's last 7 tokens", tid, fid[-7:])
    s, h, c7 = S.post("/v1/completions", {"model": "wide", "prompt": fid[-7:], "max_tokens": 8, "temperature": 0,
                                          "logprobs": 0, "return_tokens_as_token_ids": True})
    expect("truncate 7: the reply == the last 7 tokens' as a prompt", [t["id"] for t in bt["details"]["tokens"]],
           [int(t.split(":")[1]) for t in c7["choices"][0]["logprobs"]["tokens"]])
    # ---- response_format json_object: each pick under the JSON mask. With logit biases that rank '"' > ':' > '}' >
    # '{' and the stop token above all, greedy gives exactly {"":""}: the stop token is masked until the object is
    # complete, '"' after a value, ':' and '}' where no key or value may end. Seeded samples with mild biases toward
    # closing: each that stops is a JSON object (json.loads), a stream gives the whole reply's text
    def tok_ids(text):
        s, h, c = S.post("/v1/completions", {"model": "wide", "prompt": text, "max_tokens": 0, "echo": True,
                                             "logprobs": 0, "return_tokens_as_token_ids": True})
        return [int(t.split(":")[1]) for t in c["choices"][0]["logprobs"]["tokens"]] if s == 200 else []
    q_, colon, close_, open_, eot = (tok_ids(x) for x in ('"', ":", "}", "{", "<|endoftext|>"))
    if not all(len(x) == 1 for x in (q_, colon, close_, open_, eot)): fail("json: the probe tokens are not single")
    jf = {"type": "json_object"}
    bias = {str(eot[0]): 100, str(q_[0]): 90, str(colon[0]): 80, str(close_[0]): 60, str(open_[0]): 50}
    s, h, c = S.post("/v1/completions", {"model": "wide", "prompt": "x y", "max_tokens": 30, "temperature": 0,
                                         "response_format": jf, "logit_bias": bias})
    expect("json_object, biased greedy: the text and finish", (s, c["choices"][0]["text"] if s == 200 else c,
           c["choices"][0]["finish_reason"] if s == 200 else None), (200, '{"":""}', "stop"))
    mild = {str(q_[0]): 4, str(close_[0]): 4, str(colon[0]): 2}
    stopped = 0
    for seed in range(8):
        s, h, c = S.post("/v1/chat/completions", {"model": "wide", "messages": chat_msgs[0], "max_tokens": 40,
                                                  "seed": seed, "response_format": jf, "logit_bias": mild})
        if s != 200: fail(f"json_object chat, seed {seed}: {s} {c}"); continue
        t, fr = c["choices"][0]["message"]["content"], c["choices"][0]["finish_reason"]
        if fr == "stop":
            stopped += 1
            try:
                if not isinstance(json.loads(t), dict): fail(f"json_object, seed {seed}: not an object: {t!r}")
            except ValueError as ex: fail(f"json_object, seed {seed}: {t!r} is not JSON: {ex}")
        elif not t.lstrip().startswith("{"): fail(f"json_object, seed {seed}, cut at max_tokens: {t!r}")
    if stopped < 4: fail(f"json_object: only {stopped} of 8 seeded replies completed their object")
    body = {"model": "wide", "prompt": "x y", "max_tokens": 40, "seed": 3, "response_format": jf, "logit_bias": mild}
    s, h, c = S.post("/v1/completions", body)
    chunks = [json.loads(x) for x in S.sse("/v1/completions", dict(body, stream=True))[:-1]]
    expect("json_object: the stream's text == the reply's", "".join(ch["choices"][0]["text"] for ch in chunks),
           c["choices"][0]["text"])
    # vLLM's ignore_eos and min_tokens, with the end-of-text token biased to be every pick
    def eot_run(**kw):
        s, h, c = S.post("/v1/completions", {"model": "wide", "prompt": "x y", "max_tokens": 10, "temperature": 0,
                                             "logit_bias": {str(eot[0]): 100}, **kw})
        return (c["usage"]["completion_tokens"], c["choices"][0]["finish_reason"], c["choices"][0]["text"]) \
            if s == 200 else (s, c)
    expect("end-of-text biased: one token, stop", eot_run(), (1, "stop", ""))
    expect("ignore_eos: max_tokens of them, length, no text", eot_run(ignore_eos=True), (10, "length", ""))
    n_min, f_min, t_min = eot_run(min_tokens=4)
    expect("min_tokens 4: 4 tokens, then the end-of-text token", (n_min, f_min, len(t_min) > 0), (5, "stop", True))
    # min_tokens beyond a JSON object's end: the complete object allows only the stop token, which ends it
    s, h, c = S.post("/v1/completions", {"model": "wide", "prompt": "x y", "max_tokens": 30, "temperature": 0,
                                         "min_tokens": 25, "response_format": {"type": "json_object"},
                                         "logit_bias": {str(eot[0]): 100, str(q_[0]): 90, str(colon[0]): 80,
                                                        str(close_[0]): 60, str(open_[0]): 50}})
    expect("json_object with min_tokens past the object: the object, stop", (s, c["choices"][0]["text"] if s == 200
           else c, c["choices"][0]["finish_reason"] if s == 200 else None), (200, '{"":""}', "stop"))
    print(f"json_object: biased greedy == {{\"\":\"\"}}; {stopped} of 8 seeded chat replies completed their "
          "object, each a JSON object; streamed == whole; ignore_eos and min_tokens")
    print(f"penalties: logit_bias forces and bans; OpenAI frequency/presence {n_oai}/24 and TGI frequency_penalty "
          f"{n_tgi}/24 greedy steps == the penalised argmax restated; min_p 1 == greedy; typical_p seeded repeats; "
          "truncate keeps the last tokens")
    m = S.metrics()
    if m["qwenft_prefix_cache_hit_tokens_total"] or m["qwenft_kv_blocks_cached"]: fail(f"--prefix-cache off: {m}")
finally:
    expect("third server: exit after SIGTERM", S.stop(), 0)
n = ahead_counts("serve3.err")
if not n or n[1] != 0 or n[0] < 10: fail(f"decode ahead off: calls queued ahead (of all calls): {n}")

# ---- --api-key and a full queue -----------------------------------------------------------------------------------
S = Server(q, "--model", "wide", "--api-key", "sekrit", "--max-batch", "1", "--max-queue", "1", "--max-total-tokens",
           "512", "--cuda-graphs", "off", log="serve2.err")
if "cuda graphs: off (--cuda-graphs off)" not in open("serve2.err").read(): fail("--cuda-graphs off: not in the start-up log")
try:
    expect("/health needs no key", S.req("GET", "/health")[0], 200)
    for path in ("/info", "/v1/models", "/metrics"):
        expect(f"{path} without a key", S.req("GET", path)[0], 401)
    s, h, b = S.post("/generate", {"inputs": "a"}, headers={"Authorization": "Bearer wrong"})
    expect("wrong key: 401", s, 401)
    s, h, b = S.post("/v1/completions", {"prompt": "a"}, headers={"Authorization": "sekrit"})
    expect("no Bearer: 401 (OpenAI shape)", (s, "message" in b.get("error", {})), (401, True))
    auth = {"Authorization": "Bearer sekrit"}
    expect("right key", S.post("/generate", {"inputs": "a", "parameters": {"max_new_tokens": 2}}, headers=auth)[0], 200)
    # max_new_tokens not given: TGI's default 100, at most the room the prompt leaves under --max-total-tokens 512
    longp = "data " * 450
    s, h, u = S.post("/v1/completions", {"prompt": longp, "max_tokens": 1}, headers=auth)
    plen = u["usage"]["prompt_tokens"]
    s, h, b = S.post("/generate", {"inputs": longp, "parameters": {"details": True, "stop": None}}, headers=auth)
    if s != 200: fail(f"a {plen}-token prompt without max_new_tokens: {s} {b}")
    elif b["details"]["finish_reason"] == "length": expect(f"default max_new_tokens for a {plen}-token prompt",
                                                           b["details"]["generated_tokens"], min(100, 512 - plen))
    print(f"default max_new_tokens: a {plen}-token prompt got {b['details']['generated_tokens']} (room {512 - plen})")
    codes = []
    def hit():
        s, h, b = S.req("POST", "/generate", {"inputs": "a", "parameters": {"max_new_tokens": 500}}, headers=auth)
        codes.append((s, h.get("retry-after")))
    th = [threading.Thread(target=hit) for _ in range(12)]
    for t in th: t.start()
    for t in th: t.join()
    full = [c for c in codes if c[0] == 503]
    if not full or any(c[1] != "1" for c in full) or any(c[0] not in (200, 503) for c in codes):
        fail(f"12 requests at batch 1, queue 1: expected some 503 with Retry-After and the rest 200: {codes}")
    else: print(f"queue full: {len(full)} of 12 were 503 with Retry-After: 1, the rest 200; --api-key: 401 but /health")
    s, h, b = S.post("/v1/completions", {"prompt": "a", "n": 2}, headers=auth)
    expect("n = 2 over --max-queue 1: 400 naming n", (s, b["error"]["param"]), (400, "n"))
    # ---- SIGTERM while streaming: the stream finishes, exit 0 ----------------------------------------------------
    out = {}
    def stream():
        out["ev"] = S.sse("/generate_stream", {"inputs": "a", "parameters": {"max_new_tokens": 400}}, headers=auth)
    t = threading.Thread(target=stream); t.start()
    time.sleep(0.05)
    S.p.send_signal(signal.SIGTERM)
    t.join(60)
    rc = S.p.wait(60)
    expect("SIGTERM: exit 0", rc, 0)
    ev = out.get("ev", [])
    expect("SIGTERM: the running stream finished", len(ev), 400)
    if ev: expect("SIGTERM: its last event", json.loads(ev[-1])["details"]["finish_reason"], "length")
    log = open("serve2.err").read()
    if "SIGTERM: no new requests" not in log: fail(f"no drain message: {log}")
    try:
        socket.create_connection(("127.0.0.1", S.port), timeout=2).close(); fail("still accepting after SIGTERM")
    except OSError: pass
    print("SIGTERM: the stream in flight finished (400 tokens), exit 0, no longer listening")
finally:
    S.stop()
sys.exit(1 if bad else 0)
PY
echo PASS
