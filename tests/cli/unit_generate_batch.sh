#!/usr/bin/env bash
# generate's prompt forms, stop conditions and checks (src/generate/gen_prompts.c, src/generate/decode.c, src/cli/cmd_generate.c) on a
# fixture model widened to the fixture tokenizer's 2003 ids (qwen2_gqa_untied with 2048 vocabulary rows, so ChatML and
# text prompts are in its vocabulary):
#   --prompts FILE.jsonl ({"prompt"}, {"messages"}, {"prompt_ids"}) gives one line per prompt in input order, each
#     equal to that prompt generated alone;
#   --chat --prompt X == --prompt with the ChatML written out (system prompt, <|im_start|>assistant\n), --system
#     changes it, {"messages"} with a system turn == the same; the reply text leaves out a closing <|im_end|>;
#   --stop STR stops at the token that completes STR; --stop-id stops after that id; finish says why;
#   streamed plain output == the --json text;
#   --repetition-penalty changes a repetitive greedy continuation, 1.0 does not; a tiny --top-p is greedy;
#   --decode-ahead off (each step's picks read before the next step is queued) == on (the default) for a batch, stops
#     by string and id mid-batch, streaming and 1-2 new tokens; --timing says which ran (sampling: off, why);
#   bad values exit 2 naming the option or FILE:LINE (--max-new-tokens beyond the context, --top-p 1.5,
#   --temperature 0, --greedy with --temperature, a bad --prompts line, two prompt sources);
#   QWENFT_PAGED_LEN_STEP (a bench hook, the attention bound's step): 256 gives the same ids, 100 exits 2 naming it.
# Env: QWENFT (binary), WORK (scratch dir, created here), SRC (source tree).
set -euo pipefail
. "$SRC/tests/unit_common.sh"
fixture_prologue
wide_fixture

python3 - "$QWENFT" <<'PY'
import json, subprocess, sys
q = sys.argv[1]; bad = 0
def gen(*args, rc=0, raw=False, n=24):
    cmd = [q, "generate", "--model", "wide", "--max-new-tokens", str(n), *args]
    p = subprocess.run(cmd, capture_output=True)
    if p.returncode != rc:
        print(f"FAIL: {' '.join(cmd)}: exit {p.returncode}, expected {rc}\n{p.stderr.decode()}"); sys.exit(1)
    if rc: return p.stderr.decode()
    out = p.stdout.decode("utf-8", errors="replace")  # raw bytes; --json text is their lossy form
    return out if raw else [json.loads(l) for l in out.splitlines()]
def expect(what, ours, want):
    global bad
    if ours != want: bad += 1; print(f"FAIL {what}:\n  ours {ours!r}\n  want {want!r}")

SYS = "You are a helpful assistant."
chatml = lambda sys_, user: f"<|im_start|>system\n{sys_}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n"
# --chat == the ChatML written out; --system; {"messages"} with a system turn
a = gen("--chat", "--prompt", "hello there", "--json")[0]
b = gen("--prompt", chatml(SYS, "hello there"), "--json")[0]
expect("--chat == ChatML by hand (ids)", a["ids"], b["ids"])
c = gen("--chat", "--system", "Be brief.", "--prompt", "hello there", "--json")[0]
d = gen("--prompt", chatml("Be brief.", "hello there"), "--json")[0]
expect("--chat --system == ChatML by hand", c["ids"], d["ids"])
if a["ids"] == c["ids"]: bad += 1; print("FAIL: --system did not change the continuation")
# batch: one line per prompt in input order, each equal to the prompt alone
recs = [{"prompt": "the quick brown fox"},
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello there"}]},
        {"prompt_ids": [5, 9, 100, 1500, 3]},
        {"prompt": "a"}]
with open("p.jsonl", "w") as f:
    for r in recs: f.write(json.dumps(r) + "\n")
batch = gen("--prompts", "p.jsonl", "--json")
expect("--prompts: lines", len(batch), 4)
alone = [gen("--prompt", "the quick brown fox", "--json")[0], d,
         gen("--prompt-ids", "5,9,100,1500,3", "--json")[0], gen("--prompt", "a", "--json")[0]]
for i, (x, y) in enumerate(zip(batch, alone)): expect(f"--prompts line {i + 1} == alone", x, y)
print("--prompts: 4 prompts (text, messages, ids) batched == each alone; --chat == ChatML by hand")
# --chat: the reply text leaves out the closing stop token, the ids keep it (a --stop-id inside the reply)
full = gen("--chat", "--prompt", "hello there", "--json", n=40)[0]["ids"]
i = next(i for i in range(3, len(full)) if full[i] not in full[:i])
st = gen("--chat", "--prompt", "hello there", "--json", "--stop-id", str(full[i]), n=40)[0]
head = gen("--chat", "--prompt", "hello there", "--json", n=i)[0]
expect("--chat stop: ids keep the stop token", st["ids"], full[:i + 1])
expect("--chat stop: text leaves it out", st["text"], head["text"])
# stop strings and ids on a long continuation
base = gen("--prompt", "the quick brown fox", "--json", n=60)[0]
ids, text = base["ids"], base["text"]
if len(ids) < 20: print(f"FAIL: need a 20-token continuation, got {ids}"); sys.exit(1)
prefix = gen("--prompt", "the quick brown fox", "--json", n=12)[0]["text"]
stop = text[len(prefix) - 3:len(prefix)] if len(prefix) >= 3 else text[:1]
s = gen("--prompt", "the quick brown fox", "--json", "--stop", stop, n=60)[0]
k = len(s["ids"])
expect("--stop: finish", s["finish"], "stop")
expect("--stop: the ids are a prefix", ids[:k], s["ids"])
prev = gen("--prompt", "the quick brown fox", "--json", n=k - 1)[0]["text"] if k > 1 else ""
if stop not in s["text"] or stop in prev: bad += 1; print(f"FAIL --stop {stop!r}: not the first token completing it: {s}")
sid = ids[7]
t = gen("--prompt", "the quick brown fox", "--json", "--stop-id", f"{sid + 1},{sid}", n=60)[0]
expect("--stop-id", t["ids"], ids[:ids.index(sid) + 1])
expect("--stop-id finish", t["finish"], "stop")
expect("no stop: finish", base["finish"] if 2002 not in ids else "length", "length")
print(f"--stop {stop!r} stopped after {k} tokens; --stop-id {sid} after {len(t['ids'])}")
# streamed plain output == the --json text
expect("streamed text", gen("--prompt", "the quick brown fox", raw=True, n=60), text + "\n")
# repetition penalty, top-p
rep = gen("--prompt-ids", "7,7,7,7", "--json", n=40)[0]["ids"]
pen = gen("--prompt-ids", "7,7,7,7", "--json", "--repetition-penalty", "1.5", n=40)[0]["ids"]
one = gen("--prompt-ids", "7,7,7,7", "--json", "--repetition-penalty", "1.0", n=40)[0]["ids"]
expect("--repetition-penalty 1.0 == none", one, rep)
if len(set(pen)) <= len(set(rep)): bad += 1; print(f"FAIL: penalty 1.5 did not diversify: {rep} vs {pen}")
tiny = gen("--prompt-ids", "7,7,7,7", "--json", "--top-p", "1e-9", "--seed", "4", n=40)[0]["ids"]
expect("--top-p 1e-9 == greedy", tiny, rep)
s1 = gen("--prompt-ids", "7,7,7,7", "--json", "--temperature", "1.5", "--top-p", "0.95", "--seed", "4", n=40)[0]["ids"]
s2 = gen("--prompt-ids", "7,7,7,7", "--json", "--temperature", "1.5", "--top-p", "0.95", "--seed", "4", n=40)[0]["ids"]
expect("top-p sampling reproducible", s1, s2)
print("repetition penalty and top-p: as specified")
# --decode-ahead off == on (the default), whatever ends the rows
def timing(*args):
    p = subprocess.run([q, "generate", "--model", "wide", "--timing", "--json", *args], capture_output=True, text=True)
    return p.stderr
for args in (["--prompts", "p.jsonl", "-n", "24"], ["--prompts", "p.jsonl", "-n", "1"], ["--prompts", "p.jsonl", "-n", "2"],
             ["--prompts", "p.jsonl", "-n", "60", "--stop", stop], ["--prompts", "p.jsonl", "-n", "60", "--stop-id", str(sid)],
             ["--prompt", "the quick brown fox", "-n", "60"]):
    on = gen(*args, "--json", n=60)
    off = gen(*args, "--json", "--decode-ahead", "off", n=60)
    expect(f"--decode-ahead off == on: {args}", off, on)
expect("--decode-ahead off, streamed", gen("--prompt", "the quick brown fox", "--decode-ahead", "off", raw=True, n=60), text + "\n")
for args, say in ((["--prompt", "a"], "decode ahead on\n"), (["--prompt", "a", "--decode-ahead", "off"], "decode ahead off (--decode-ahead off)"),
                  (["--prompt", "a", "--temperature", "0.7"], "decode ahead off (sampling")):
    err = timing(*args)
    if say not in err: bad += 1; print(f"FAIL: --timing {args}: no {say!r}: {err}")
print("--decode-ahead off == on: batches, stops, streaming, 1-2 new tokens; --timing says which")
# bad values: exit 2 naming the option
for args, key in ((["--prompt-ids", "1", "--decode-ahead", "maybe"], "--decode-ahead"),
                  (["--prompt-ids", "1", "--max-new-tokens", "600"], "--max-new-tokens 600"),
                  (["--prompt-ids", "1", "--top-p", "1.5"], "--top-p=1.5"),
                  (["--prompt-ids", "1", "--temperature", "0"], "--temperature=0"),
                  (["--prompt-ids", "1", "--max-new-tokens", "x"], "--max-new-tokens=x"),
                  (["--prompt-ids", "1", "--greedy", "--temperature", "0.5"], "--greedy"),
                  (["--prompt-ids", "1", "--prompt", "a"], "not several"),
                  (["--prompt-ids", "1", "--frobnicate"], "--frobnicate")):
    err = gen(*args, rc=2)
    if key not in err: bad += 1; print(f"FAIL: {args}: message should name {key!r}: {err}")
open("bad.jsonl", "w").write('{"prompt": "a"}\n{"prompt": 3}\n')
err = gen("--prompts", "bad.jsonl", rc=2)
if "bad.jsonl:2: prompt is" not in err: bad += 1; print(f"FAIL: bad --prompts line: {err}")
open("bad2.jsonl", "w").write('{"prompt_ids": [1, -2]}\n')
err = gen("--prompts", "bad2.jsonl", rc=2)
if "bad2.jsonl:1: prompt_ids[1]" not in err: bad += 1; print(f"FAIL: bad prompt_ids: {err}")
print("bad values: exit 2 naming the option / FILE:LINE")
# the attention bound's step (QWENFT_PAGED_LEN_STEP, a bench hook): another step, the same text on the CPU (its
# attention bounds each token by its own position); a bad one stops with exit 2 naming it
import os
os.environ["QWENFT_PAGED_LEN_STEP"] = "256"
fox256 = gen("--prompt", "the quick brown fox", "--json")[0]["ids"]
os.environ["QWENFT_PAGED_LEN_STEP"] = "100"
err = gen("--prompt", "the quick brown fox", rc=2)
if "QWENFT_PAGED_LEN_STEP=100" not in err: bad += 1; print(f"FAIL: QWENFT_PAGED_LEN_STEP=100: {err}")
del os.environ["QWENFT_PAGED_LEN_STEP"]
expect("QWENFT_PAGED_LEN_STEP=256: the default's ids", fox256, gen("--prompt", "the quick brown fox", "--json")[0]["ids"])
print("QWENFT_PAGED_LEN_STEP: another step the same ids, a bad one exit 2")
sys.exit(1 if bad else 0)
PY
echo PASS
