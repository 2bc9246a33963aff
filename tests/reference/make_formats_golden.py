#!/usr/bin/env python3
"""Goldens of `qwen-ft prepare` for the record layouts that need no conversion script (Alpaca, --map FIELD=ROLE,
--map FIELD=text), the reference of tests/cli/unit_prepare_formats.sh:
    python make_formats_golden.py [--out fixtures/formats]
Needs only HF `tokenizers` (pip install tokenizers; the committed files were made with tokenizers 0.23.3). Two runs
give byte-identical files.

The tokenizer is fixtures/tokenizer/tokenizer.json (made by make_tokenizer_fixture.py), loaded with
tokenizers.Tokenizer; ids(text) = encode(text, add_special_tokens=False).ids, which is what transformers'
tokenizer(text).input_ids gives for this tokenizer (it has no post-processor). Each record is first turned into a
list of turns, as documented in docs/formats.md:
  Alpaca: system = "system" or the default; per history pair a user and an assistant turn; then a user turn of
          the non-empty ones of instruction and input joined by "\\n" (LLaMA-Factory's Alpaca converter) and an
          assistant turn of output;
  --map question=user,answer=assistant (and sys=system): the fields, in the order of the map;
  --map body=text: the field as a plain-text record (its ids + <|endoftext|>);
then rendered by `preprocess` below, which restates QwenLM/Qwen finetune.py `preprocess` (commit
00dceebbaaec2bf642ad327f7022ac9b6f8da187) as make_chat_golden.py does: every piece tokenized on its own, labels
IGNORE_TOKEN_ID where finetune.py sets them, loss_mask = label != IGNORE_TOKEN_ID.

Writes
  alpaca.jsonl, map.jsonl, text.jsonl   the records prepare reads
  golden.json                           per run (input file and args): every document's ids and loss_mask"""
import argparse, hashlib, json, os

import tokenizers
from tokenizers import Tokenizer

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("--out", default=os.path.join(here, "fixtures", "formats"))
a = ap.parse_args()
os.makedirs(a.out, exist_ok=True)

TOK_FILE = os.path.join(here, "fixtures", "tokenizer", "tokenizer.json")
tok = Tokenizer.from_file(TOK_FILE)
IGNORE_TOKEN_ID = -100
DEFAULT_SYSTEM = "You are a helpful assistant."


def ids(text):
    return tok.encode(text, add_special_tokens=False).ids


IM_START, IM_END, EOT = ids("<|im_start|>"), ids("<|im_end|>"), ids("<|endoftext|>")
assert len(IM_START) == len(IM_END) == len(EOT) == 1
IM_START, IM_END, EOT = IM_START[0], IM_END[0], EOT[0]


def preprocess(source, system_message):
    """finetune.py's preprocess for one source of {"from": "user"|"assistant", "value"} turns, no padding."""
    roles = {"user": "<|im_start|>user", "assistant": "<|im_start|>assistant"}
    nl_tokens = ids("\n")
    _system = ids("system") + nl_tokens
    if roles[source[0]["from"]] != roles["user"]:
        source = source[1:]
    input_id, target = [], []
    system = [IM_START] + _system + ids(system_message) + [IM_END] + nl_tokens
    input_id += system
    target += [IM_START] + [IGNORE_TOKEN_ID] * (len(system) - 3) + [IM_END] + nl_tokens
    for sentence in source:
        role = roles[sentence["from"]]
        _input_id = ids(role) + nl_tokens + ids(sentence["value"]) + [IM_END] + nl_tokens
        input_id += _input_id
        if role == "<|im_start|>user":
            _target = [IM_START] + [IGNORE_TOKEN_ID] * (len(_input_id) - 3) + [IM_END] + nl_tokens
        else:
            _target = [IM_START] + [IGNORE_TOKEN_ID] * len(ids(role)) + \
                _input_id[len(ids(role)) + 1:-2] + [IM_END] + nl_tokens
        target += _target
    assert len(input_id) == len(target)
    return input_id, [0 if t == IGNORE_TOKEN_ID else 1 for t in target]


def alpaca_turns(rec):
    turns = []
    for q, r in rec.get("history") or []:
        turns += [{"from": "user", "value": q}, {"from": "assistant", "value": r}]
    prompt = "\n".join(x for x in (rec["instruction"], rec.get("input") or "") if x)
    turns += [{"from": "user", "value": prompt}, {"from": "assistant", "value": rec["output"]}]
    return (rec["system"] if rec.get("system") is not None else DEFAULT_SYSTEM), turns


ALPACA = [
    {"instruction": "Give three tips for staying healthy.", "input": "",
     "output": "1. Eat well.\n2. Exercise.\n3. Sleep enough."},
    {"instruction": "Translate to French:", "input": "Good morning, café!", "output": "Bonjour, café !"},
    {"instruction": "Summarise", "input": "MPI is a message-passing standard.", "output": "MPI: messages.",
     "system": "You are terse."},
    {"instruction": "And the next number?", "input": "", "output": "4",
     "history": [["What is 1+1?", "2"], ["And 2+1?", "3"]]},
    {"instruction": "解释一下量子计算。", "output": "量子计算利用量子比特。 🚀"},
    {"instruction": "", "input": "only an input", "output": "ok"},
    {"instruction": "Trailing spaces   ", "input": "  and tabs\t", "output": "  kept as they are \n"},
]
MAP = [
    {"question": "What is HDF5?", "answer": "A file format for large arrays.", "id": 1},
    {"question": "Who wrote it?", "answer": "The HDF Group.", "sys": "Answer in five words."},
    {"answer": "Order of keys does not matter.", "question": "Does it?"},
    {"question": "空的回答？", "answer": ""},
]
TEXT = [
    {"body": "Plain text taken from another field.\nSecond line."},
    {"body": "", "title": "an empty body is an <|endoftext|> alone"},
    {"body": "special <|im_start|> tokens stay special"},
]

out = {"tokenizers": tokenizers.__version__, "tokenizer": "fixtures/tokenizer/tokenizer.json",
       "tokenizer_sha256": hashlib.sha256(open(TOK_FILE, "rb").read()).hexdigest(),
       "vocab_size": tok.get_vocab_size(with_added_tokens=True), "eos_token_id": EOT, "runs": {}}


def doc_alpaca(rec):
    system, turns = alpaca_turns(rec)
    return preprocess(turns, system)


def doc_map(rec):
    turns = [{"from": "user", "value": rec["question"]}, {"from": "assistant", "value": rec["answer"]}]
    return preprocess(turns, rec.get("sys", DEFAULT_SYSTEM))


def doc_text(rec):
    x = ids(rec["body"]) + [EOT]
    return x, [1] * len(x)


for name, fname, recs, fn, args in (
        ("alpaca", "alpaca.jsonl", ALPACA, doc_alpaca, []),
        ("map", "map.jsonl", MAP, doc_map, ["--map", "question=user,answer=assistant,sys=system"]),
        ("text", "text.jsonl", TEXT, doc_text, ["--map", "body=text"])):
    with open(os.path.join(a.out, fname), "w", encoding="utf-8") as f:
        for rec in recs:
            f.write(json.dumps(rec, ensure_ascii=False) + "\n")
    docs = []
    for rec in recs:
        x, m = fn(rec)
        docs.append({"ids": x, "loss_mask": m})
    out["runs"][name] = {"input": fname, "args": args, "docs": docs}

with open(os.path.join(a.out, "golden.json"), "w", encoding="utf-8") as f:
    json.dump(out, f, ensure_ascii=False, separators=(",", ":"))
    f.write("\n")
print("wrote", a.out, ":", ", ".join(f"{k} {sum(len(d['ids']) for d in v['docs'])} tokens"
                                     for k, v in out["runs"].items()))
