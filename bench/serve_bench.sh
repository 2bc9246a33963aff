#!/usr/bin/env bash
# bench/serve_bench.sh [PRESET] — `qwen-ft serve` on the GPU machine (the [serve] issue's targets): the preset
# randomly initialised (default qwen2.5-7b), bf16, one GPU, served on 127.0.0.1 with --max-batch 128:
#   1. batch 1: one /generate_stream of a prompt of BENCH_PROMPT_TOKENS (512) tokens, 128 new tokens: time to first
#      token, decode tokens/s (prompts fitted to the count within 2 tokens through HF `tokenizers` where PY has it);
#   2. 32 concurrent streamed /v1/completions (greedy, prompts of 512 tokens, 128 new tokens each): generated
#      tokens/s in total (wall time from the first request, the prefill included), and the decode rate once every
#      prompt is in (from the last first token to the last token);
#   3. a shared start of about BENCH_PROMPT_TOKENS tokens, then 9 distinct questions of about an eighth of it, one
#      request at a time: time to first token of the first and the mean of the others (the prefix cache's effect;
#      SERVE_ARGS="--prefix-cache off" for the baseline), and the prompt tokens taken from the cache;
#   4. the seed's Locust test: 100 users, spawn rate 10, {"inputs", "parameters": {"max_new_tokens": 256}} to
#      /generate for 2 minutes (BENCH_LOCUST_TIME): requests/s, failures, p50 and p95 latency.
# One JSON line per part in $OUT/serve_bench.jsonl, the server's /metrics at the end in $OUT/serve_metrics.txt.
# SERVE_MODEL=PATH serves a model directory instead of the preset (QWENFT_BACKEND=cpu: a dry run on a CPU);
# SERVE_ARGS adds serve options (e.g. "--cuda-graphs off"); BENCH_LOCUST_TIME=0 skips part 4.
# Needs: QWENFT (default build-cuda/qwen-ft), a python with locust (PY; `pip install -r
# tests/reference/requirements-serve.txt`), TOKENIZER (default the fixture tokenizer: its ids are a subset of the
# model's vocabulary; replies of a random model decode as U+FFFD where the fixture lacks an id).
set -uo pipefail
model=${1:-qwen2.5-7b}
root=$(cd "$(dirname "$0")/.." && pwd)
Q=${QWENFT:-$root/build-cuda/qwen-ft}
PY=${PY:-python3}
out=${OUT:-/tmp}
mkdir -p "$out"
tok=${TOKENIZER:-$root/tests/reference/fixtures/tokenizer/tokenizer.json}
work=$(mktemp -d)
[ "${BENCH_LOCUST_TIME:-2m}" = 0 ] || "$PY" -c "import locust" 2> /dev/null || { echo "serve_bench: $PY has no locust (pip install -r tests/reference/requirements-serve.txt)"; exit 2; }
# shellcheck disable=SC2086 # SERVE_ARGS: options, split on spaces
QWENFT_BACKEND=${QWENFT_BACKEND:-cuda} "$Q" serve --model "${SERVE_MODEL:-preset:$model}" --tokenizer "$tok" --port 0 --max-batch 128 --max-queue 4096 \
  --max-total-tokens "${BENCH_MAX_TOTAL:-1024}" --model-id "$model" ${SERVE_ARGS:-} 2> "$work/serve.err" &
pid=$!
for _ in $(seq 600); do grep -q "listening on" "$work/serve.err" && break; sleep 0.5; kill -0 $pid 2> /dev/null || break; done
port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$work/serve.err")
[ -n "$port" ] || { echo "serve_bench: the server did not start:"; cat "$work/serve.err"; exit 1; }
head -3 "$work/serve.err"
url=http://127.0.0.1:$port
"$PY" - "$url" "$model" "$tok" <<'PY' | tee -a "$out/serve_bench.jsonl"
import http.client, json, os, random, sys, threading, time
url, model, tokpath = sys.argv[1], sys.argv[2], sys.argv[3]
host, port = url[7:].split(":"); port = int(port)
words = "the of and to in is was for on that with as by at from his her an which or be are this had not but".split()
def post(path, body):
    c = http.client.HTTPConnection(host, port, timeout=600)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    return c, c.getresponse()
def ntok(text): # the prompt's tokens under the server's tokenizer
    c, r = post("/v1/completions", {"model": model, "prompt": text, "max_tokens": 1}); b = json.loads(r.read()); c.close()
    return b["usage"]["prompt_tokens"] if r.status == 200 else 10 ** 9  # over the limit
want = int(os.environ.get("BENCH_PROMPT_TOKENS", "512"))
def text(seed, n):
    r = random.Random(seed); return " ".join(r.choice(words) for _ in range(n))
nwords = max(1, want // 3)
for _ in range(6): # words per prompt for about `want` tokens
    k = ntok(text(0, nwords))
    if abs(k - want) <= 8: break
    nwords = max(1, nwords // 2 if k == 10 ** 9 else nwords * want // k)
# Each prompt is fitted to `want` tokens (within 2): the words' token counts differ, so one word count for every
# seed left the prompts 8-25% longer (about 600 tokens for 512 until 2026-12-07). The counts come from the
# tokenizer file through HF `tokenizers` (the server's own count equals it: checked on one prompt below), not from
# the server: a prompt sent to count it would sit in the prefix cache when measured.
count = None
try:
    from tokenizers import Tokenizer
    tf = os.path.join(tokpath, "tokenizer.json") if os.path.isdir(tokpath) else tokpath
    tk = Tokenizer.from_file(tf)
    count = lambda t: len(tk.encode(t, add_special_tokens=False).ids)
    probe = text(999, nwords)
    if count(probe) != ntok(probe): count = None
except Exception:
    pass
if count is None:
    print(f"serve_bench: prompts of {nwords} words each, not fitted to {want} tokens (no HF tokenizers for {tokpath}, "
          "or its count differs from the server's)", file=sys.stderr)
fitted = {}
def prompt(seed):
    if seed not in fitted:
        n = nwords
        for _ in range(12 if count else 0):
            k = count(text(seed, n))
            if abs(k - want) <= 2: break
            n = max(1, n + (1 if k < want else -1) * max(1, abs(k - want) // 3))
        fitted[seed] = text(seed, n)
    return fitted[seed]
for s in [1, 7] + [100 + i for i in range(32)]: prompt(s) # fitted before any timing
# warm-up
c, r = post("/generate", {"inputs": "hello", "parameters": {"max_new_tokens": 4}}); r.read(); c.close()
def metric(name):
    c = http.client.HTTPConnection(host, port, timeout=60); c.request("GET", "/metrics"); b = c.getresponse().read()
    c.close()
    for line in b.decode().splitlines():
        if line.startswith(name + " "): return float(line.split()[1])
    return 0.0
def spec_counts(): # speculation's drafts fed and accepted so far (--speculate; 0 without)
    return metric("qwenft_spec_draft_tokens_total"), metric("qwenft_spec_accepted_tokens_total")
def spec_since(c0):
    c1 = spec_counts(); return {"spec_drafts": int(c1[0] - c0[0]), "spec_accepted": int(c1[1] - c0[1])}
sp0 = spec_counts()
# 1. batch 1, streamed: TTFT and decode tokens/s
t0 = time.time(); c, r = post("/generate_stream", {"inputs": prompt(1), "parameters": {"max_new_tokens": 128}})
times = []
if r.status != 200: sys.exit(f"serve_bench: /generate_stream: {r.status} {r.read()[:300]!r}")
while True:
    line = r.readline()
    if not line: break
    if line.startswith(b"data: "): times.append(time.time())
c.close()
n = len(times)
print(json.dumps({"part": "batch1", "model": model, "serve_args": __import__("os").environ.get("SERVE_ARGS", ""), "prompt_tokens": ntok(prompt(1)), "new": n, "ttft_s": round(times[0] - t0, 4),
                  "decode_tok_s": round((n - 1) / (times[-1] - times[0]), 1) if n > 1 else None, **spec_since(sp0)}))
# 2. 32 concurrent greedy completions, streamed (one event per token): the generated tokens over the wall time
# (the prompts' prefill included), and the decode rate once every prompt is in (the tokens whose events arrive after
# the last request's first token, over the time from it to the last token: a request that stops early at an
# end-of-text token lowers it)
res = []
sp0 = spec_counts()
def one(i):
    t = time.time(); c, r = post("/v1/completions", {"model": model, "prompt": prompt(100 + i), "max_tokens": 128,
                                                     "temperature": 0, "stream": True,
                                                     "stream_options": {"include_usage": True}})
    if r.status != 200: print("serve_bench: /v1/completions:", r.status, r.read()[:300], file=sys.stderr); return
    times, usage = [], None
    while True:
        line = r.readline()
        if not line: break
        if not line.startswith(b"data: ") or line.startswith(b"data: [DONE]"): continue
        ev = json.loads(line[6:])
        if ev.get("usage"): usage = ev["usage"]
        if ev.get("choices") and ev["choices"][0].get("text") is not None: times.append(time.time())
    c.close()
    res.append((time.time() - t, usage, times))
th = [threading.Thread(target=one, args=(i,)) for i in range(32)]
t0 = time.time()
for t in th: t.start()
for t in th: t.join()
wall = time.time() - t0
gen = sum(u["completion_tokens"] for _, u, _ in res if u)
ta, tb = max(ts[0] for _, _, ts in res if ts), max(ts[-1] for _, _, ts in res if ts)
inwin = sum(1 for _, _, ts in res for x in ts if ta < x <= tb)
print(json.dumps({"part": "concurrent32", "model": model, "serve_args": __import__("os").environ.get("SERVE_ARGS", ""), "ok": len(res), "prompt_tokens_mean": sum(u["prompt_tokens"] for _, u, _ in res if u) / max(1, len(res)),
                  "generated": gen, "wall_s": round(wall, 3), "generated_tok_s": round(gen / wall, 1),
                  "after_prefill_s": round(tb - ta, 3), "decode_tok_s_after_prefill": round(inwin / (tb - ta), 1) if tb > ta else None,
                  "ttft_max_s": round(ta - t0, 3), "latency_max_s": round(max(l for l, _, _ in res), 3),
                  **spec_since(sp0)}))
# 3. a shared start (a system prompt, a document) of about BENCH_PROMPT_TOKENS tokens, then distinct questions of
# about an eighth of it, one request at a time, 16 new tokens each: the first prefills all of it, the others only
# their question where the prefix cache is on (--prefix-cache): time to first token of the first and of the others
def question(i):
    r = random.Random(300 + i); return " " + " ".join(r.choice(words) for _ in range(max(1, nwords // 8)))
def ttft(text):
    t = time.time(); c, r = post("/generate_stream", {"inputs": text, "parameters": {"max_new_tokens": 16}})
    first = None
    while True:
        line = r.readline()
        if not line: break
        if first is None and line.startswith(b"data: "): first = time.time() - t
    c.close()
    return first
shared = prompt(7)
h0 = metric("qwenft_prefix_cache_hit_tokens_total")
t_first = ttft(shared + question(0))
t_rest = [ttft(shared + question(i)) for i in range(1, 9)]
hits = metric("qwenft_prefix_cache_hit_tokens_total") - h0
print(json.dumps({"part": "shared_start", "model": model, "serve_args": __import__("os").environ.get("SERVE_ARGS", ""),
                  "shared_tokens": ntok(shared), "question_tokens": ntok(question(1)), "requests": 9,
                  "ttft_first_s": round(t_first, 4), "ttft_rest_mean_s": round(sum(t_rest) / len(t_rest), 4),
                  "ttft_rest_max_s": round(max(t_rest), 4), "prefix_cache_hit_tokens": int(hits)}))
PY
if [ "${BENCH_LOCUST_TIME:-2m}" != 0 ]; then
cat > "$work/stress_test.py" <<'LF'
from locust import HttpUser, task, constant
class QwenUser(HttpUser):
    wait_time = constant(0)
    @task
    def generate(self):
        with self.client.post("/generate", json={"inputs": "Explain MPI in one paragraph.",
                                                 "parameters": {"max_new_tokens": 256}}, catch_response=True) as r:
            ok = r.status_code == 200 and isinstance(r.json().get("generated_text"), str)
            r.success() if ok else r.failure(f"status {r.status_code}: {r.text[:200]}")
LF
(cd "$work" && "$PY" -m locust -f stress_test.py --headless -u 100 -r 10 -t "${BENCH_LOCUST_TIME:-2m}" --host "$url" \
  --csv lc --only-summary > locust.out 2>&1)
"$PY" - "$work/lc_stats.csv" "$model" <<'PY' | tee -a "$out/serve_bench.jsonl"
import csv, json, sys
a = [r for r in csv.DictReader(open(sys.argv[1])) if r["Name"] == "Aggregated"][0]
print(json.dumps({"part": "locust100", "model": sys.argv[2], "users": 100, "spawn_rate": 10, "max_new_tokens": 256,
                  "requests": int(a["Request Count"]), "failures": int(a["Failure Count"]),
                  "req_s": round(float(a["Requests/s"]), 2), "p50_ms": a["50%"], "p95_ms": a["95%"]}))
PY
fi
curl -s "$url/metrics" > "$out/serve_metrics.txt" 2> /dev/null || true
kill -TERM $pid; wait $pid; echo "serve exit: $?"
grep -E "model calls|cuda graphs|prompt tokens|speculation" "$work/serve.err" # the steps, those queued ahead, the graphs captured, the prefix cache's share
rm -rf "$work"
