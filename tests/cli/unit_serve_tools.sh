#!/usr/bin/env bash
# Tool calls end to end: the tiny fixture model (widened to the fixture tokenizer, its context raised to 1024) is
# fine-tuned by qwen-ft on one Qwen2.5-template conversation whose assistant turn calls a tool (prepare --template
# qwen2.5: the tools in the system turn, the call as a <tool_call> block), until it replies with that turn; then
# `qwen-ft serve` of the checkpoint answers the conversation's user turn with the same tools:
#   - /v1/chat/completions: message.content is the text before the block, message.tool_calls the call (name, the
#     arguments as JSON text), finish_reason "tool_calls"; streamed: content deltas never show the block, one delta
#     carries the call with its index, the last chunk finishes "tool_calls";
#   - tool_choice "none": the block stays in the content, no tool_calls; max_tokens cutting the block: the text as
#     content, finish "length"; parallel_tool_calls false: the one call; tool_choice "required" and a function
#     object: 400 naming tool_choice;
#   - the official OpenAI client (where $PYREF has it; else said skipped) reads the call, streamed and not.
# Env: QWENFT, WORK, SRC (PYREF optional).
set -euo pipefail
. "$SRC/tests/unit_common.sh"
fixture_prologue
wide_fixture
fail() { echo "FAIL: $*"; exit 1; }
sed -i 's/"max_position_embeddings": 512/"max_position_embeddings": 1024/' wide/config.json
cat > chat.jsonl <<'EOF'
{"messages": [{"role": "user", "content": "What is the weather in Paris?"}, {"role": "assistant", "content": "Let me check.", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}}]}], "tools": [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city", "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}}, "required": ["city"]}}}]}
EOF
"$QWENFT" import --from wide --out model.h5 > import.out 2>&1 || { cat import.out; fail "import"; }
"$QWENFT" prepare --tokenizer wide --template qwen2.5 --in chat.jsonl --out t.h5 > prep.out 2>&1 ||
  { cat prep.out; fail "prepare"; }
cat > deck.cfg <<'DECK'
model = { from = "model.h5"; };
data = { train = "t.h5"; seq_len = 1024; };
train_batch_size = 1; max_steps = 120;
optimizer = { type = "AdamW"; params = { lr = 1e-2; }; };
checkpoint = { dir = "ckpt"; };
eval = { every_steps = 0; };
log = { dir = "logs"; steps_per_print = 20; };
DECK
"$QWENFT" train deck.cfg > train.out 2>&1 || { tail train.out; fail "train"; }
PYTHONPATH="$SRC/tests/tools" python3 - "$QWENFT" <<'PY'
import json, sys
from serve_harness import Server
q = sys.argv[1]; bad = 0
def fail(msg):
    global bad; bad += 1; print("FAIL:", msg)
def expect(what, ours, want):
    if ours != want: fail(f"{what}:\n  ours {ours!r}\n  want {want!r}")
rec = json.loads(open("chat.jsonl").read())
msgs, tools = rec["messages"][:1], rec["tools"]
want_args = {"city": "Paris", "unit": "celsius"}
S = Server(q, "--model", "ckpt", "--tokenizer", "wide", "--template", "qwen2.5", "--max-total-tokens", "1024")
try:
    body = {"model": "m", "messages": msgs, "tools": tools, "max_tokens": 120, "temperature": 0}
    s, h, r = S.post("/v1/chat/completions", dict(body, tool_choice="none"))
    raw = r["choices"][0]["message"]["content"] if s == 200 else r
    if s != 200 or "<tool_call>" not in raw or "tool_calls" in r["choices"][0]["message"]:
        fail(f"tool_choice none: the reply should carry the block as text (the model has learnt the call): {r}")
    s, h, r = S.post("/v1/chat/completions", body)
    m = r["choices"][0]["message"] if s == 200 else {}
    expect("content before the call", m.get("content"), "Let me check.")
    calls = m.get("tool_calls") or []
    expect("one call", len(calls), 1)
    if calls:
        c = calls[0]
        expect("the call", (c["type"], c["function"]["name"], json.loads(c["function"]["arguments"]),
                            isinstance(c["id"], str) and len(c["id"]) > 0), ("function", "get_weather", want_args, True))
    expect("finish_reason", r["choices"][0]["finish_reason"] if s == 200 else r, "tool_calls")
    chunks = [json.loads(x) for x in S.sse("/v1/chat/completions", dict(body, stream=True))[:-1]]
    deltas = [ch["choices"][0]["delta"] for ch in chunks if ch["choices"]]
    text = "".join(d.get("content") or "" for d in deltas)
    tc = [t for d in deltas for t in d.get("tool_calls") or []]
    expect("stream: the content deltas", text.strip(), "Let me check.")
    if "<tool" in text: fail(f"stream: the block leaked into the content: {text!r}")
    expect("stream: the call delta", [(t["index"], t["function"]["name"], json.loads(t["function"]["arguments"]))
                                      for t in tc], [(0, "get_weather", want_args)])
    expect("stream: finish", chunks[-1]["choices"][0]["finish_reason"], "tool_calls")
    s, h, r = S.post("/v1/chat/completions", dict(body, parallel_tool_calls=False))
    expect("parallel_tool_calls false: one call", len(r["choices"][0]["message"].get("tool_calls") or []), 1)
    s, h, r = S.post("/v1/chat/completions", dict(body, max_tokens=12))
    m = r["choices"][0]["message"]
    if "tool_calls" in m or r["choices"][0]["finish_reason"] != "length" or not raw.startswith(m["content"]):
        fail(f"max_tokens 12 (inside the block): {r}")
    for tc_ in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        s, h, r = S.post("/v1/chat/completions", dict(body, tool_choice=tc_))
        expect(f"tool_choice {tc_}: 400 naming it", (s, r.get("error", {}).get("param")), (400, "tool_choice"))
finally:
    expect("exit after SIGTERM", S.stop(), 0)
if not bad: print("tool calls: content, tool_calls and finish 'tool_calls', streamed and not; tool_choice none, a cut "
                  "block, parallel_tool_calls false, tool_choice required refused")
sys.exit(1 if bad else 0)
PY
# the official OpenAI client, where the reference venv has it
if [ -x "${PYREF:-}" ] && "$PYREF" -c "import openai" 2> /dev/null; then
  PYTHONPATH="$SRC/tests/tools" "$PYREF" - "$QWENFT" <<'PY'
import json, sys
import openai
from serve_harness import Server
q = sys.argv[1]
rec = json.loads(open("chat.jsonl").read())
S = Server(q, "--model", "ckpt", "--tokenizer", "wide", "--template", "qwen2.5", "--max-total-tokens", "1024",
           log="serve_client.err")
ok = False
try:
    cl = openai.OpenAI(base_url=S.url() + "/v1", api_key="none")
    r = cl.chat.completions.create(model="m", messages=rec["messages"][:1], tools=rec["tools"], max_tokens=120,
                                   temperature=0)
    f = r.choices[0].message.tool_calls[0].function
    st = cl.chat.completions.create(model="m", messages=rec["messages"][:1], tools=rec["tools"], max_tokens=120,
                                    temperature=0, stream=True)
    parts = [t for ch in st if ch.choices for t in (ch.choices[0].delta.tool_calls or [])]
    ok = (f.name, json.loads(f.arguments), r.choices[0].finish_reason) == ("get_weather", {"city": "Paris",
          "unit": "celsius"}, "tool_calls") and [p.function.name for p in parts] == ["get_weather"]
    print("openai client: the tool call, streamed and not" if ok else f"FAIL: openai client: {r} {parts}")
finally:
    S.stop()
sys.exit(0 if ok else 1)
PY
else
  echo "skip: the OpenAI client check (no reference venv with openai at ${PYREF:-PYREF unset})"
fi
echo PASS
