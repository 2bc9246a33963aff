#!/usr/bin/env python3
"""The data side of the prepare benchmark (bench/prepare_bench.sh; docs/performance.md, "prepare"):
    python prepare_bench.py bpe DIR           a 151,643-token byte-level BPE trained with HF `tokenizers` on the
                                              Python sources of this machine, with Qwen2's normalizer (NFC),
                                              pre-tokenizer (Qwen2's Split regex + ByteLevel) and decoder, and
                                              Qwen's <|endoftext|>, <|im_start|>, <|im_end|> after the vocabulary:
                                              DIR/tokenizer.json
    python prepare_bench.py corpus OUT MB     JSONL text records of about 4 KB (Python sources, cut at line ends)
                                              until MB megabytes: OUT
    python prepare_bench.py hf TOK CORPUS [TOKENS.bin]
                                              HF `tokenizers` encode_batch on the corpus' texts (RAYON_NUM_THREADS
                                              sets its threads): prints wall and CPU seconds (encode only, JSON
                                              parsing not counted), MB/s and tokens/s as one JSON line; with
                                              TOKENS.bin (qwen-ft's /tokens, h5dump -b LE) whether the ids are
                                              identical
Needs `tokenizers` (pip install tokenizers)."""
import glob, json, os, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))


def sources():
    for root in ("/usr/lib/python3*", "/usr/lib/python3/dist-packages", "/usr/local/lib/python3*"):
        for d in sorted(glob.glob(root)):
            for p in sorted(glob.glob(os.path.join(d, "**", "*.py"), recursive=True)):
                try:
                    yield open(p, encoding="utf-8").read()
                except (UnicodeDecodeError, OSError):
                    pass


def bpe(out):
    from qwen2_bpe import qwen2_bpe_train  # tests/reference/qwen2_bpe.py: Qwen2's configuration, as the fixtures
    tok = qwen2_bpe_train(sources(), vocab_size=151643, min_frequency=1)
    os.makedirs(out, exist_ok=True)
    tok.save(os.path.join(out, "tokenizer.json"))
    print("vocabulary", tok.get_vocab_size(with_added_tokens=True))


def corpus(out, mb):
    n = 0
    with open(out, "w", encoding="utf-8") as f:
        while n < mb * 1e6:
            for src in sources():
                rec = []
                for line in src.splitlines(keepends=True):
                    rec.append(line)
                    if sum(map(len, rec)) >= 4000:
                        s = json.dumps({"text": "".join(rec)}, ensure_ascii=False) + "\n"
                        f.write(s)
                        n += len(s.encode())
                        rec = []
                        if n >= mb * 1e6:
                            return


def hf(tokfile, path):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(tokfile)
    texts = [json.loads(l)["text"] for l in open(path, encoding="utf-8")]
    nbytes = os.path.getsize(path)
    t0, c0 = time.time(), time.process_time()
    enc = tok.encode_batch(texts, add_special_tokens=False)
    dt, cpu = time.time() - t0, time.process_time() - c0
    ntok = sum(len(e.ids) for e in enc) + len(texts)  # + the <|endoftext|> prepare appends to each text
    same = None
    if len(sys.argv) > 4:  # /tokens of qwen-ft's dataset (h5dump -b LE): the same ids, text after text + eos?
        import array
        eos = tok.token_to_id("<|endoftext|>")
        ours = array.array("I")
        ours.frombytes(open(sys.argv[4], "rb").read())
        ref = array.array("I")
        for e in enc:
            ref.extend(e.ids)
            ref.append(eos)
        same = ours == ref
    print(json.dumps({"threads": os.environ.get("RAYON_NUM_THREADS", "all"), "seconds": round(dt, 3),
                      "cpu_seconds": round(cpu, 3), "MB_per_s": round(nbytes / 1e6 / dt, 2),
                      "MB_per_cpu_s": round(nbytes / 1e6 / cpu, 2), "tokens_per_s": round(ntok / dt), "tokens": ntok,
                      "records": len(texts), "ids_identical_to_qwen_ft": same}))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "bpe":
        bpe(sys.argv[2])
    elif cmd == "corpus":
        corpus(sys.argv[2], float(sys.argv[3]))
    elif cmd == "hf":
        hf(sys.argv[2], sys.argv[3])
