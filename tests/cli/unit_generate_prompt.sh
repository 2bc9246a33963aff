#!/usr/bin/env bash
# `qwen-ft generate --prompt TEXT` with the fixture tokenizer: for every prompt of tests/reference/fixtures/
# generate.json that is the encoding of a text (tests/reference/fixtures/chat/golden.json, made by
# make_chat_golden.py with transformers' tokenizer), `--prompt TEXT --greedy --json` gives the ids transformers'
# generate gave for those prompt ids, the same ids as `--prompt-ids`, and "text" = transformers' decode of them;
# without --json it prints that text. Continuations holding lone UTF-8 continuation bytes (ids 94, 95) give U+FFFD
# where transformers' decode does. The tokenizer is found in the model directory when it holds tokenizer.json.
# Generation stops after <|im_end|> / <|endoftext|> (a tokenizer with those tokens moved onto ids the tiny model
# emits). Bad input: --prompt without a tokenizer, --prompt with --prompt-ids, an unknown --model preset:NAME or a
# missing --model (exit 2).
# Env: QWENFT (binary), WORK (scratch dir, created here), SRC (source tree).
set -euo pipefail
. "$SRC/tests/unit_common.sh"
fixture_prologue

# a tokenizer with <|im_end|> on id 84 ('u' moves to 2002) and one with <|endoftext|> on id 92 ('}' to 2000): the
# qwen2_gqa_untied model continues '"&*.' with 48 12 2 92 8 84 ..., so generation must stop after 92 or 84
python3 - "$FIX/tokenizer/tokenizer.json" <<'PY'
import json, os, sys
for name, special, tid in (("imend", "<|im_end|>", 84), ("eot", "<|endoftext|>", 92)):
    t = json.load(open(sys.argv[1], encoding="utf-8"))
    add = next(a for a in t["added_tokens"] if a["content"] == special)
    word = next(w for w, i in t["model"]["vocab"].items() if i == tid)
    t["model"]["vocab"][word], add["id"] = add["id"], tid
    os.makedirs(name, exist_ok=True)
    json.dump(t, open(f"{name}/tokenizer.json", "w", encoding="utf-8"), ensure_ascii=False)
PY

python3 - "$QWENFT" "$FIX" <<'PY'
import json, os, shutil, subprocess, sys
q, fix = sys.argv[1], sys.argv[2]
tok = f"{fix}/tokenizer/tokenizer.json"
g = json.load(open(f"{fix}/chat/golden.json", encoding="utf-8"))
bad = 0
def gen(model, *args, tokenizer=tok, json_out=True, rc=0):
    cmd = [q, "generate", "--model", model, "--max-new-tokens", "16", "--greedy", *args]
    if tokenizer: cmd += ["--tokenizer", tokenizer]
    if json_out: cmd += ["--json"]
    p = subprocess.run(cmd, capture_output=True)
    if p.returncode != rc:
        print(f"FAIL: {' '.join(cmd)}: exit {p.returncode}, expected {rc}\n{p.stderr.decode()}"); sys.exit(1)
    return (json.loads(p.stdout) if json_out else p.stdout.decode("utf-8")) if rc == 0 else p.stderr.decode()
def expect(what, ours, want):
    global bad
    if ours != want:
        bad += 1; print(f"FAIL {what}:\n  ours {ours!r}\n  want {want!r}")
for c in g["generate"]:
    m = f"{fix}/{c['case']}/hf"
    what = f"{c['case']} --prompt {c['prompt_text']!r}"
    a = gen(m, "--prompt", c["prompt_text"])
    expect(what + " ids (transformers' generate)", a["ids"], c["ids"])
    expect(what + " text (transformers' decode)", a["text"], c["text"])
    b = gen(m, "--prompt-ids", ",".join(map(str, c["prompt_ids"])))
    expect(what + " --prompt-ids ids", b["ids"], a["ids"])
    expect(what + " --prompt-ids text", b["text"], a["text"])
    expect(what + " plain output", gen(m, "--prompt", c["prompt_text"], json_out=False), c["text"] + "\n")
print(f"{len(g['generate'])} prompts: ids equal transformers' generate, text equal its decode")
# continuations with lone UTF-8 continuation bytes: "text" has U+FFFD where transformers' decode has it
for c in g["generate_ids"]:
    a = gen(f"{fix}/{c['case']}/hf", "--prompt-ids", ",".join(map(str, c["prompt_ids"])))
    expect(f"{c['case']} --prompt-ids {c['prompt_ids']} (lossy UTF-8)", (a["ids"], a["text"]), (c["ids"], c["text"]))

# the model directory's tokenizer.json is used without --tokenizer
c = g["generate"][0]
shutil.copytree(f"{fix}/{c['case']}/hf", "withtok")
shutil.copy(tok, "withtok/tokenizer.json")
a = gen("withtok", "--prompt", c["prompt_text"], tokenizer=None)
expect("tokenizer.json found in --model's directory", (a["ids"], a["text"]), (c["ids"], c["text"]))
# without any tokenizer: --prompt-ids still works, "text" is null
a = gen(f"{fix}/{c['case']}/hf", "--prompt-ids", ",".join(map(str, c["prompt_ids"])), tokenizer=None)
expect("--prompt-ids without a tokenizer", (a["ids"], a["text"]), (c["ids"], None))

# stop tokens: <|im_end|> = 84 and <|endoftext|> = 92 in the moved tokenizers
c = next(x for x in g["generate"] if x["case"] == "qwen2_gqa_untied" and x["prompt_ids"] == [1, 5, 9, 13])
assert c["ids"][:6] == [48, 12, 2, 92, 8, 84], c["ids"]
m = f"{fix}/qwen2_gqa_untied/hf"
a = gen(m, "--prompt", c["prompt_text"], tokenizer="imend/tokenizer.json")
expect("stop after <|im_end|>", (a["ids"], a["text"]), ([48, 12, 2, 92, 8, 84], c["text"][:5] + "<|im_end|>"))
a = gen(m, "--prompt", c["prompt_text"], tokenizer="eot/tokenizer.json")
expect("stop after <|endoftext|>", (a["ids"], a["text"]), ([48, 12, 2, 92], c["text"][:3] + "<|endoftext|>"))

# bad input: exit 2 with a message that says what to do
err = gen(m, "--prompt", "hello", tokenizer=None, rc=2)
if "--tokenizer" not in err: bad += 1; print(f"FAIL: --prompt without a tokenizer should say to pass --tokenizer: {err}")
err = gen(m, "--prompt", "hello", "--prompt-ids", "1,2", rc=2)
if "--prompt-ids" not in err: bad += 1; print(f"FAIL: --prompt with --prompt-ids: {err}")
err = gen(m, "--prompt", "hello", tokenizer="no/such/tokenizer.json", rc=2)
if "no/such/tokenizer.json" not in err: bad += 1; print(f"FAIL: a missing tokenizer is not named: {err}")
err = gen(m, "--prompt", "zzzz zzzz", rc=2)  # ids above the tiny model's vocabulary (96)
if "vocabulary" not in err: bad += 1; print(f"FAIL: prompt ids outside the model: {err}")
err = gen("preset:qwen9-1t", "--prompt-ids", "1,2", tokenizer=None, rc=2)
if "generate: --model preset:qwen9-1t: unknown preset" not in err: bad += 1; print(f"FAIL: an unknown preset: {err}")
err = gen("no/such/model.h5", "--prompt-ids", "1,2", tokenizer=None, rc=2)
if "no/such/model.h5" not in err: bad += 1; print(f"FAIL: a missing --model is not named: {err}")
sys.exit(1 if bad else 0)
PY
echo "unit_generate_prompt: all checks passed"
