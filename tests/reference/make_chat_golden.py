#!/usr/bin/env python3
"""Goldens of `qwen-ft prepare --tokenizer` (text and conversation records) and `qwen-ft generate --prompt`, the
reference of tests/cli/unit_prepare_chat.sh and tests/cli/unit_generate_prompt.sh:
    python make_chat_golden.py [--out fixtures/chat]
Needs transformers + tokenizers, and torch for two generate cases (the committed files were made with
transformers 5.17.0, tokenizers 0.23.3, torch 2.11.0; --without-torch leaves those two out). Two runs give
byte-identical files.

The tokenizer is fixtures/tokenizer/tokenizer.json (made by make_tokenizer_fixture.py), loaded as
transformers.PreTrainedTokenizerFast. Conversations are rendered by `preprocess` below, which follows
QwenLM/Qwen finetune.py `preprocess` (commit 00dceebbaaec2bf642ad327f7022ac9b6f8da187) statement by statement:
every piece tokenized on its own with tokenizer(text).input_ids, labels IGNORE_TOKEN_ID (-100) where finetune.py
sets them; loss_mask = label != -100 (and the label then equals the input id). Three things finetune.py does not
do, and qwen-ft does (docs/formats.md): "human"/"gpt" (ShareGPT) and the messages form's role/content are mapped
to user/assistant; a system turn (first only) replaces the default system message for its record; no padding or
truncation to max_len. The --mask assistant variant keeps only the assistant value tokens and their <|im_end|>.

Writes
  input.jsonl   the records prepare reads (conversations, messages, text, one pre-tokenized record)
  golden.json   per prepare run (args): every document's ids and loss_mask, vocab_size, eos id; and per generate
                case: the prompt text (whose encoding is a prompt of fixtures/generate.json), its ids, the ids
                transformers generated for it (from generate.json) and their decoded text; and two --prompt-ids
                cases whose continuations (transformers' greedy generate, run here) hold ids 94/95, lone UTF-8
                continuation bytes, so that their text has U+FFFD (decode's lossy UTF-8)."""
import argparse, hashlib, json, os

import tokenizers, transformers
from transformers import PreTrainedTokenizerFast

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("--out", default=os.path.join(here, "fixtures", "chat"))
ap.add_argument("--without-torch", action="store_true",
                help="leave out generate_ids (the two cases transformers' generate makes): for CI, which has no torch")
a = ap.parse_args()
os.makedirs(a.out, exist_ok=True)

TOK_FILE = os.path.join(here, "fixtures", "tokenizer", "tokenizer.json")
tok = PreTrainedTokenizerFast(tokenizer_file=TOK_FILE, eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                              clean_up_tokenization_spaces=False)
IGNORE_TOKEN_ID = -100
DEFAULT_SYSTEM = "You are a helpful assistant."


def ids(text):
    r = tok(text).input_ids
    assert r == tok(text, add_special_tokens=False).input_ids  # the fixture adds no BOS/EOS
    return r


IM_START, IM_END, EOT = ids("<|im_start|>"), ids("<|im_end|>"), ids("<|endoftext|>")
assert len(IM_START) == len(IM_END) == len(EOT) == 1
IM_START, IM_END, EOT = IM_START[0], IM_END[0], EOT[0]

RECORDS = [
    {"conversations": [{"from": "user", "value": "Hello, who are you?"},
                       {"from": "assistant", "value": "I am Qwen, a helpful assistant."}]},
    {"conversations": [{"from": "system", "value": "You are a pirate."},
                       {"from": "human", "value": "Where is the treasure?"},
                       {"from": "gpt", "value": "Arr, under the palm tree!"},
                       {"from": "human", "value": "How deep?"},
                       {"from": "gpt", "value": "Three paces, matey."}]},
    {"messages": [{"role": "system", "content": "你是一个有用的助手。"},
                  {"role": "user", "content": "今天天气怎么样？ 😀 cafe\u0301 (NFD)"},
                  {"role": "assistant", "content": "今天天气很好！🚀 Café naïve 👨‍👩‍👧"}]},
    {"text": "The quick brown fox jumps over the lazy dog.\nSecond line: café, 東京, 42 + 7 = 49"},
    {"messages": [{"role": "user", "content": ""}, {"role": "assistant", "content": ""}]},
    {"conversations": [{"from": "gpt", "value": "A leading assistant turn is dropped, as finetune.py does."},
                       {"from": "human", "value": "def f(x):\n    return x * 2\n"},
                       {"from": "gpt", "value": "  spaces  and\ttabs\r\n\n"}]},
    {"input_ids": [5, 6, 7], "loss_mask": [0, 1, 1]},
    {"text": ""},
    {"messages": [{"role": "user", "content": "Special tokens in a value: <|im_end|> stay special"},
                  {"role": "assistant", "content": "ok<|endoftext|>"}], "id": "extra keys are ignored"},
    {"conversations": [{"from": "system", "value": ""}, {"from": "user", "value": "empty system"},
                       {"from": "assistant", "value": "fine"}, {"from": "user", "value": "two user turns"},
                       {"from": "user", "value": "in a row"}, {"from": "assistant", "value": "IT'S OK."}]},
]

ROLE = {"user": "user", "human": "user", "assistant": "assistant", "gpt": "assistant", "system": "system"}


def preprocess(source, system_message, assistant_only):
    """finetune.py's preprocess for one source (no padding); returns input_id, mask."""
    roles = {"user": "<|im_start|>user", "assistant": "<|im_start|>assistant"}
    im_start, im_end = IM_START, IM_END
    nl_tokens = ids("\n")
    _system = ids("system") + nl_tokens
    if roles[source[0]["from"]] != roles["user"]:
        source = source[1:]
    input_id, target, amask = [], [], []
    system = [im_start] + _system + ids(system_message) + [im_end] + nl_tokens
    input_id += system
    target += [im_start] + [IGNORE_TOKEN_ID] * (len(system) - 3) + [im_end] + nl_tokens
    amask += [0] * len(system)
    assert len(input_id) == len(target)
    for j, sentence in enumerate(source):
        role = roles[sentence["from"]]
        _input_id = ids(role) + nl_tokens + ids(sentence["value"]) + [im_end] + nl_tokens
        input_id += _input_id
        if role == "<|im_start|>user":
            _target = [im_start] + [IGNORE_TOKEN_ID] * (len(_input_id) - 3) + [im_end] + nl_tokens
            amask += [0] * len(_input_id)
        elif role == "<|im_start|>assistant":
            _target = [im_start] + [IGNORE_TOKEN_ID] * len(ids(role)) + \
                _input_id[len(ids(role)) + 1:-2] + [im_end] + nl_tokens
            nv = len(ids(sentence["value"]))
            amask += [0] * (len(ids(role)) + 1) + [1] * nv + [1, 0]  # the value and its <|im_end|>
        else:
            raise NotImplementedError
        target += _target
    assert len(input_id) == len(target) == len(amask)
    for i, t in zip(input_id, target):
        assert t == IGNORE_TOKEN_ID or t == i
    if assistant_only:
        return input_id, amask
    return input_id, [0 if t == IGNORE_TOKEN_ID else 1 for t in target]


def document(rec, system_message, assistant_only):
    if "input_ids" in rec:
        return rec["input_ids"], rec["loss_mask"]
    if "text" in rec:
        x = ids(rec["text"]) + [EOT]
        return x, [1] * len(x)
    turns = rec["conversations"] if "conversations" in rec else \
        [{"from": m["role"], "value": m["content"]} for m in rec["messages"]]
    turns = [{"from": ROLE[t["from"]], "value": t["value"]} for t in turns]
    if turns[0]["from"] == "system":
        system_message, turns = turns[0]["value"], turns[1:]
    return preprocess(turns, system_message, assistant_only)


runs = {
    "qwen": {"args": ["--mask", "qwen"], "system": DEFAULT_SYSTEM, "assistant_only": False},
    "assistant": {"args": ["--mask", "assistant"], "system": DEFAULT_SYSTEM, "assistant_only": True},
    "system": {"args": ["--system", "Be brief. 简洁。"], "system": "Be brief. 简洁。", "assistant_only": False},
}
out = {"transformers": transformers.__version__, "tokenizers": tokenizers.__version__,
       "tokenizer": "fixtures/tokenizer/tokenizer.json",
       "tokenizer_sha256": hashlib.sha256(open(TOK_FILE, "rb").read()).hexdigest(),
       "vocab_size": len(tok), "eos_token_id": EOT, "runs": {}, "generate": []}
for name, r in runs.items():
    docs = []
    for rec in RECORDS:
        x, m = document(rec, r["system"], r["assistant_only"])
        docs.append({"ids": x, "loss_mask": m})
    out["runs"][name] = {"args": r["args"], "docs": docs}

# generate: prompts of fixtures/generate.json written as text (only those whose text encodes back to the same ids)
gen = json.load(open(os.path.join(here, "fixtures", "generate.json")))
for case, rs in gen["cases"].items():
    for g in rs:
        text = tok.decode(g["prompt"], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        if ids(text) != g["prompt"]:
            continue
        out["generate"].append({"case": case, "prompt_text": text, "prompt_ids": g["prompt"], "ids": g["ids"],
                                "text": tok.decode(g["ids"], skip_special_tokens=False,
                                                   clean_up_tokenization_spaces=False)})
assert len(out["generate"]) >= 3

cases = () if a.without_torch else (("qwen3_qknorm", [4]), ("qwen2_tied", [94]))
if cases:
    import torch
    from transformers import AutoModelForCausalLM
    out["generate_ids"] = []
for case, prompt in cases:
    m = AutoModelForCausalLM.from_pretrained(os.path.join(here, "fixtures", case, "hf"), dtype=torch.float32).eval()
    with torch.no_grad():
        o = m.generate(torch.tensor([prompt]), max_new_tokens=16, do_sample=False, eos_token_id=None, pad_token_id=0)
    g = o[0, len(prompt):].tolist()
    assert 94 in g or 95 in g, g
    out["generate_ids"].append({"case": case, "prompt_ids": prompt, "ids": g, "text": tok.decode(
        g, skip_special_tokens=False, clean_up_tokenization_spaces=False)})

with open(os.path.join(a.out, "input.jsonl"), "w", encoding="utf-8") as f:
    for rec in RECORDS:
        f.write(json.dumps(rec, ensure_ascii=False) + "\n")
with open(os.path.join(a.out, "golden.json"), "w", encoding="utf-8") as f:
    json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
    f.write("\n")
print("wrote", os.path.join(a.out, "input.jsonl"), "and golden.json:",
      ", ".join(f"{k} {sum(len(d['ids']) for d in v['docs'])} tokens" for k, v in out["runs"].items()),
      f"; {len(out['generate'])} generate cases")
