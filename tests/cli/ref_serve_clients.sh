#!/usr/bin/env bash
# qwen-ft serve against the real clients (PyPI, installed into the pyref venv by the test set-up from
# tests/reference/requirements-serve.txt; skipped, saying why, when they are missing):
#   - Locust, headless, 20 users for 30 s POSTing the seed's body {"inputs": ..., "parameters": {"max_new_tokens": N}}
#     to /generate: zero failures, every response a JSON object whose generated_text is a string (checked per
#     response in the locustfile), and the greedy text of each prompt the same every time;
#   - the official OpenAI Python client (with --api-key, so the client's Bearer header is checked): chat and
#     completion, with and without streaming, equal to `qwen-ft generate` greedy (--chat for the chat); models.list;
#     logprobs (chat top_logprobs, completions logprobs; echo with max_tokens 0: the prompt scored) as the client's
#     types read them;
#     a bad request raises the client's BadRequestError naming the field.
# Env: QWENFT, WORK, SRC, PYREF.
set -euo pipefail
. "$SRC/tests/unit_common.sh"
fixture_prologue
[ -x "${PYREF:-}" ] || { echo "SKIP: no reference venv at ${PYREF:-PYREF unset} (.ci/setup.sh test makes it from tests/reference/requirements*.txt when PyPI is reachable)"; exit 77; }
"$PYREF" -c "import locust, openai" 2> /dev/null ||
  { echo "SKIP: $PYREF lacks locust or openai (PyPI unreachable at set-up?)"; exit 77; }
wide_fixture
LOCUST="$(dirname "$PYREF")/locust"

cat > locustfile.py <<'LF'
# the seed's stress test shape: POST /generate {"inputs", "parameters": {"max_new_tokens"}}; every reply checked
import json, random
from locust import HttpUser, constant, task
PROMPTS = ["the quick brown fox", "hello there", "data data data data", "a"]
SEEN = {}
class Generate(HttpUser):
    wait_time = constant(0)
    @task
    def generate(self):
        p = random.choice(PROMPTS)
        with self.client.post("/generate", json={"inputs": p, "parameters": {"max_new_tokens": 32}},
                              catch_response=True) as r:
            try:
                body = r.json()
            except ValueError:
                return r.failure(f"not JSON: {r.text[:200]!r}")
            if r.status_code != 200: return r.failure(f"status {r.status_code}: {body}")
            if not isinstance(body, dict) or set(body) != {"generated_text"} or not isinstance(body["generated_text"], str):
                return r.failure(f"malformed: {body!r}")
            if SEEN.setdefault(p, body["generated_text"]) != body["generated_text"]:
                return r.failure(f"greedy text of {p!r} changed: {body['generated_text']!r} vs {SEEN[p]!r}")
            r.success()
LF

PYTHONPATH="$SRC/tests/tools" "$PYREF" - "$QWENFT" "$LOCUST" <<'PY'
import csv, json, subprocess, sys
from serve_harness import Server
q, locust = sys.argv[1], sys.argv[2]; bad = 0
def fail(msg):
    global bad; bad += 1; print("FAIL:", msg)
def expect(what, ours, want):
    if ours != want: fail(f"{what}:\n  ours {ours!r}\n  want {want!r}")
def generate(rec, n):
    open("p.jsonl", "w").write(json.dumps(rec) + "\n")
    p = subprocess.run([q, "generate", "--model", "wide", "--prompts", "p.jsonl", "--json", "-n", str(n)],
                       capture_output=True, text=True, check=True)
    return json.loads(p.stdout)

# ---- Locust ------------------------------------------------------------------------------------------------------
S = Server(q, "--model", "wide", "--max-batch", "16", "--max-total-tokens", "256")
try:
    p = subprocess.run([locust, "-f", "locustfile.py", "--headless", "-u", "20", "-r", "20", "-t", "30s", "--host",
                        S.url(), "--csv", "lc", "--only-summary", "--loglevel", "WARNING"], capture_output=True, text=True)
    rows = {r["Name"]: r for r in csv.DictReader(open("lc_stats.csv"))}
    agg = rows.get("Aggregated") or {}
    n, nf = int(agg.get("Request Count", 0)), int(agg.get("Failure Count", -1))
    if p.returncode != 0 or nf != 0 or n < 100:
        fail(f"locust: exit {p.returncode}, {n} requests, {nf} failures\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}\n"
             + open("lc_failures.csv").read()[:2000])
    else:
        print(f"locust: 20 users, 30 s: {n} requests, 0 failures, {float(agg['Requests/s']):.1f} req/s, "
              f"p50 {agg['50%']} ms, p95 {agg['95%']} ms")
    m = S.metrics()
    if m.get('qwenft_requests_total{endpoint="/generate",status="2xx"}', 0) < n: fail("metrics: fewer 2xx than locust saw")
finally:
    expect("locust server: exit after SIGTERM", S.stop(), 0)

# ---- the OpenAI client ---------------------------------------------------------------------------------------------
import openai
S = Server(q, "--model", "wide", "--api-key", "sekrit", "--max-total-tokens", "256", log="serve2.err")
try:
    cl = openai.OpenAI(base_url=S.url() + "/v1", api_key="sekrit")
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello there"}]
    ref_chat = generate({"messages": msgs}, 16)
    r = cl.chat.completions.create(model="wide", messages=msgs, max_tokens=16, temperature=0)
    expect("chat: content == generate --chat", r.choices[0].message.content, ref_chat["text"])
    expect("chat: role, finish_reason, usage", (r.choices[0].message.role, r.choices[0].finish_reason,
           r.usage.completion_tokens, r.object), ("assistant", "length", 16, "chat.completion"))
    st = cl.chat.completions.create(model="wide", messages=msgs, max_tokens=16, temperature=0, stream=True)
    expect("chat stream == chat", "".join(c.choices[0].delta.content or "" for c in st if c.choices), ref_chat["text"])
    ref = generate({"prompt": "the quick brown fox"}, 16)
    c = cl.completions.create(model="wide", prompt="the quick brown fox", max_tokens=16, temperature=0)
    if ref["finish"] == "length": expect("completion == generate", c.choices[0].text, ref["text"])
    expect("completion: usage", (c.usage.prompt_tokens + c.usage.completion_tokens, c.usage.total_tokens), (c.usage.total_tokens,) * 2)
    st = cl.completions.create(model="wide", prompt="the quick brown fox", max_tokens=16, temperature=0, stream=True)
    expect("completion stream == completion", "".join(x.choices[0].text for x in st), c.choices[0].text)
    expect("models.list", [m.id for m in cl.models.list()], ["wide"])
    r = cl.chat.completions.create(model="wide", messages=msgs, max_tokens=8, temperature=0, logprobs=True,
                                   top_logprobs=3)
    lc = r.choices[0].logprobs.content
    expect("chat logprobs: an entry a token, 3 alternatives, the chosen first",
           [(len(e.top_logprobs), e.top_logprobs[0].token == e.token) for e in lc], [(3, True)] * 8)
    text8 = b"".join(bytes(e.bytes) for e in lc).decode(errors="replace").rstrip("\ufffd")
    expect("chat logprobs: their bytes begin the text", ref_chat["text"].startswith(text8) and len(text8) > 0, True)
    c = cl.completions.create(model="wide", prompt="the quick brown fox", max_tokens=8, temperature=0, logprobs=3)
    lp = c.choices[0].logprobs
    expect("completion logprobs: tokens, values, alternatives (3 + the chosen at most)",
           (len(lp.tokens), len(lp.token_logprobs), all(1 <= len(t) <= 4 for t in lp.top_logprobs)), (8, 8, True))
    e0 = cl.completions.create(model="wide", prompt="the quick brown fox", max_tokens=0, temperature=0, logprobs=2,
                               echo=True) # a prompt scored alone: what evaluation harnesses ask
    el = e0.choices[0].logprobs
    expect("echo, max_tokens 0: the prompt's text and tokens, the first logprob None",
           (e0.choices[0].text, len(el.tokens) == e0.usage.prompt_tokens, el.token_logprobs[0],
            all(isinstance(x, float) for x in el.token_logprobs[1:])), ("the quick brown fox", True, None, True))
    bo = cl.completions.create(model="wide", prompt="the quick brown fox", max_tokens=8, n=2, best_of=3, seed=5,
                               top_p=0.9) # the best 2 of 3 sampled candidates
    expect("best_of 3, n 2: two choices indexed 0, 1; usage counts the 3 candidates' tokens (1-8 each)",
           ([x.index for x in bo.choices], 3 <= bo.usage.completion_tokens <= 24), ([0, 1], True))
    # the fields of the client's signature that qwen-ft applies: JSON mode, OpenAI's penalties and logit_bias
    jr = cl.chat.completions.create(model="wide", messages=msgs, max_tokens=24, seed=2,
                                    response_format={"type": "json_object"}, frequency_penalty=0.5,
                                    presence_penalty=0.2, logit_bias={"1": 3})
    jt, jf = jr.choices[0].message.content, jr.choices[0].finish_reason
    ok = jt.lstrip().startswith("{") and (jf == "length" or isinstance(json.loads(jt), dict))
    expect("json_object with penalties and logit_bias: an object (or its prefix at max_tokens)", ok, True)
    try:
        cl.chat.completions.create(model="wide", messages=msgs, max_tokens=4,
                                   response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {}}})
        fail("response_format json_schema was accepted")
    except openai.BadRequestError as e:
        expect("json_schema: BadRequestError param", (e.status_code, (e.body or {}).get("param")),
               (400, "response_format"))
    try:
        cl.completions.create(model="wide", prompt="a", max_tokens=100000)
        fail("max_tokens 100000 was accepted")
    except openai.BadRequestError as e:
        expect("BadRequestError param", (e.status_code, (e.body or {}).get("param")), (400, "max_tokens"))
    try:
        openai.OpenAI(base_url=S.url() + "/v1", api_key="wrong").models.list(); fail("a wrong key was accepted")
    except openai.AuthenticationError: pass
    print("openai client: chat, completion, both streamed, == qwen-ft generate greedy; models; logprobs; JSON mode "
          "with penalties and logit_bias; 400 and 401 as its errors")
finally:
    expect("openai server: exit after SIGTERM", S.stop(), 0)
sys.exit(1 if bad else 0)
PY
echo PASS
