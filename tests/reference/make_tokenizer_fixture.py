#!/usr/bin/env python3
"""Tokenizer fixtures and goldens for tests/unit/test_tokenizer.c (io/tokenizer.c):
    python make_tokenizer_fixture.py [--out fixtures/tokenizer]
Needs `tokenizers`, `transformers` and `tiktoken` (the committed files were made with tokenizers 0.23.3,
transformers 5.17.0 and tiktoken 0.14.0). Two runs give byte-identical files.

Writes
  tokenizer.json   a byte-level BPE (vocab 2000) trained here on synthetic varied text, with EXACTLY Qwen2's
                   normalizer (NFC), pre-tokenizer (Split regex, Isolated + ByteLevel without regex), decoder
                   (ByteLevel) and added special tokens <|endoftext|>, <|im_start|>, <|im_end|> after the vocab;
                   merges saved as "a b" strings, the form Qwen's published files use
  qwen.tiktoken    the same vocabulary as Qwen v1's format: base64(token bytes) rank, rank = id
  shuffled.tiktoken  the same tokens, multi-byte ranks permuted: tiktoken's lowest-rank-concatenation BPE then
                   gives other ids than merge order would (the fixture above cannot tell the two apart)
  mini.json        a hand-made BPE exercising what Qwen's files do not: ignore_merges, a bare ByteLevel
                   pre-tokenizer with GPT-2's regex, no normalizer, ["a","b"] merges, overlapping added tokens
                   (leftmost-longest), a non-special added token, an added token with non-ASCII content
  goldens.json     per test string: ids from `tokenizers` (checked equal to transformers' tokenizer(text)),
                   from tiktoken with Qwen v1's pattern and special tokens (after NFC, as tokenization_qwen.py
                   does) for both .tiktoken files, from mini.json; and the decodes (hex of the bytes before any lossy UTF-8 step)."""
import argparse, base64, hashlib, json, os, unicodedata

import tiktoken, tokenizers, transformers
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from qwen2_bpe import QWEN_PAT, SPECIALS, qwen2_bpe_train

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("--out", default=os.path.join(here, "fixtures", "tokenizer"))
a = ap.parse_args()
os.makedirs(a.out, exist_ok=True)

V1_SPECIALS = SPECIALS + [f"<|extra_{i}|>" for i in range(205)]


# ---- a deterministic training corpus (own LCG: no dependence on Python's random module) ----------------------------
class Lcg:
    def __init__(self, s):
        self.s = s

    def next(self, n):
        self.s = (self.s * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        return (self.s >> 33) % n


def corpus():
    r = Lcg(12345)
    syl = ["ka", "to", "ri", "men", "sha", "qu", "ex", "ing", "tion", "the", "and", "str", "pre", "ly", "er", "on",
           "bla", "dro", "gu", "vi", "pol", "zen", "ark", "um", "fi", "wo", "ce", "nt", "sy", "jo", "hap", "kle"]
    words = ["hello", "world", "function", "return", "value", "model", "token", "train", "Qwen", "data", "the",
             "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "café", "naïve", "résumé", "über", "Straße",
             "niño", "façade", "coöperate", "ångström", "smörgåsbord", "crème", "brûlée"]
    cjk = "我们的模型在大规模数据上训练，支持中文和英文。今天天气很好！東京は日本の首都です。한국어 텍스트도 있습니다。"
    emoji = ["😀", "🚀", "👍🏽", "🇩🇪", "❤️", "👨‍👩‍👧", "✨", "🔥"]
    code = ["def f(x):\n    return x * 2\n", "for (int i = 0; i < n; i++) {\n\tsum += a[i];\n}\n",
            "if __name__ == \"__main__\":\n    main()\n", "const x = {a: 1, b: [2, 3]};\r\n", "SELECT * FROM t WHERE id=42;",
            "    # comment with  two  spaces\n", "x<<=3; y>>=1; z!=w && p||q", "print(f\"{value:08.3f}\")\n"]
    contractions = ["I'm", "you're", "it's", "we've", "they'll", "he'd", "don't", "IT'S", "We'RE", "can't"]
    lines = []
    for i in range(6000):
        kind = r.next(8)
        if kind == 0:
            lines.append(" ".join(words[r.next(len(words))] for _ in range(3 + r.next(12))) + ".")
        elif kind == 1:
            a0 = r.next(len(cjk) - 20)
            lines.append(cjk[a0:a0 + 5 + r.next(15)] + "".join(cjk[r.next(len(cjk))] for _ in range(r.next(6))))
        elif kind == 2:
            lines.append(code[r.next(len(code))])
        elif kind == 3:
            lines.append(" ".join(str(r.next(10 ** (1 + r.next(7)))) for _ in range(1 + r.next(6))) + " " +
                         emoji[r.next(len(emoji))])
        elif kind == 4:
            lines.append(" ".join(contractions[r.next(len(contractions))] for _ in range(2 + r.next(5))))
        elif kind == 5:
            ws = ["".join(syl[r.next(len(syl))] for _ in range(1 + r.next(4))) for _ in range(1 + r.next(6))]
            lines.append(" ".join(ws) + " " * r.next(5) + ws[0].capitalize() + "\t" * r.next(2) + "\n" * r.next(3))
        elif kind == 6:  # accented text in NFD (the normalizer composes it) and NFC
            t = " ".join(words[18 + r.next(12)] for _ in range(2 + r.next(4)))
            lines.append(unicodedata.normalize("NFD" if r.next(2) else "NFC", t))
        else:
            lines.append("  ".join(words[r.next(len(words))].upper() for _ in range(2 + r.next(3))) + "\r\n")
    return lines


# ---- tokenizer.json, Qwen2's configuration -------------------------------------------------------------------------
tok = qwen2_bpe_train(corpus(), vocab_size=2000, min_frequency=2)
j = json.loads(tok.to_str())
j["decoder"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
j["post_processor"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
j["model"]["merges"] = [" ".join(m) if isinstance(m, list) else m for m in j["model"]["merges"]]
tj_path = os.path.join(a.out, "tokenizer.json")
with open(tj_path, "w", encoding="utf-8") as f:
    json.dump(j, f, ensure_ascii=False, indent=1)
    f.write("\n")
hf = Tokenizer.from_file(tj_path)
fast = transformers.PreTrainedTokenizerFast(tokenizer_file=tj_path, clean_up_tokenization_spaces=False)

# ---- qwen.tiktoken: the same vocabulary, as bytes ------------------------------------------------------------------
b2u = {}
n = 0
printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
for b in range(256):
    if b in printable:
        b2u[chr(b)] = b
    else:
        b2u[chr(256 + n)] = b
        n += 1
vocab = j["model"]["vocab"]
ranks = {bytes(b2u[c] for c in t): i for t, i in vocab.items()}
assert len(ranks) == len(vocab) and sorted(ranks.values()) == list(range(len(vocab)))
with open(os.path.join(a.out, "qwen.tiktoken"), "w") as f:
    for t, i in sorted(ranks.items(), key=lambda kv: kv[1]):
        f.write(base64.b64encode(t).decode() + " " + str(i) + "\n")
# the same tokens with the multi-byte ones' ranks shuffled: tiktoken's rank-of-concatenation BPE then differs
# from the merge order, which the fixture above cannot show
order = sorted((i for t, i in ranks.items() if len(t) > 1), key=lambda i: (i * 7919) % 1009)
shuf_id = {old: new for old, new in zip(sorted(order), order)}
shuffled = {t: shuf_id.get(i, i) for t, i in ranks.items()}
assert sorted(shuffled.values()) == list(range(len(vocab)))
with open(os.path.join(a.out, "shuffled.tiktoken"), "w") as f:
    for t, i in sorted(shuffled.items(), key=lambda kv: kv[1]):
        f.write(base64.b64encode(t).decode() + " " + str(i) + "\n")
# tokenization_qwen.py (the release with <|extra_N|>): special ids follow the ranks (151643 for the real file).
enc = tiktoken.Encoding("qwen-fixture", pat_str=QWEN_PAT, mergeable_ranks=ranks,
                        special_tokens={s: len(ranks) + k for k, s in enumerate(V1_SPECIALS)})


enc_shuf = tiktoken.Encoding("qwen-fixture-shuffled", pat_str=QWEN_PAT, mergeable_ranks=shuffled,
                             special_tokens={s: len(ranks) + k for k, s in enumerate(V1_SPECIALS)})


def v1_encode(text, e=enc):  # QWenTokenizer.tokenize: NFC, then tiktoken with every special token allowed
    return e.encode(unicodedata.normalize("NFC", text), allowed_special="all", disallowed_special=())


# ---- mini.json ----------------------------------------------------------------------------------------------------
mv = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
for t in ["ab", "bc", "abc", "Ġa", "Ġab", "xyz", "xy", "ll", "lll"]:
    mv[t] = len(mv)
mm = [("a", "b"), ("b", "c"), ("Ġ", "a"), ("Ġa", "b"), ("x", "y"), ("l", "l")]  # no "ab c", no "xy z", no "ll l"
mini = Tokenizer(models.BPE(mv, mm, ignore_merges=True))
mini.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
mini.decoder = decoders.ByteLevel()
mini.add_tokens([AddedToken("<x>", normalized=False), AddedToken("<x><y>", normalized=False),
                 AddedToken("ümlaut", normalized=False)])
mini.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
mj = json.loads(mini.to_str())
mj["model"]["merges"] = [list(m) if not isinstance(m, list) else m for m in mj["model"]["merges"]]
mini_path = os.path.join(a.out, "mini.json")
with open(mini_path, "w", encoding="utf-8") as f:
    json.dump(mj, f, ensure_ascii=False, indent=1)
    f.write("\n")
mini = Tokenizer.from_file(mini_path)

# ---- goldens --------------------------------------------------------------------------------------------------------
tests = [
    "", "hello world", "Hello, World!", "The quick brown fox jumps over the lazy dog.",
    "<|im_start|>user\nhi<|im_end|>\n", "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "<|im_start|>user\n你好<|im_end|>\n<|im_start|>assistant\n", "text<|endoftext|>", "<|endoftext|><|endoftext|>",
    "<|im_end", "<|im_start|", "<<|im_start|>>", "<|extra_0|> <|extra_204|><|extra_205|>", "<|EXTRA_1|>",
    "   leading spaces", "multiple    spaces   before    words", "trailing spaces   ", "tab\tseparated\t\tvalues",
    "line one\nline two\n\n\nline five", "windows\r\nline\r\nendings\r\n", "\r\n\r\n", "  \n  \n", " \t \n",
    "12345", "3.14159 and 2,718,281", "phone 555-0199, year 2024", "٣٤٥ and ①②③ and ²³ and Ⅻ", "007 1e10 0x1F",
    "I'm sure it's fine; you're right, we've seen they'll go, he'd know.", "IT'S WE'RE THEY'LL", "'s 's's ''s", "it'ſ",
    "don't can't won't", "café naïve résumé", unicodedata.normalize("NFD", "café naïve résumé Ångström"),
    "e\u0301 a\u0308 o\u0302\u0323 \u212b \u2126", "Straße über Öl", "我们的模型在大规模数据上训练。", "東京は日本の首都です",
    "한국어 텍스트", unicodedata.normalize("NFD", "한국어"), "mixed English中文日本語한국어 and ελληνικά and русский",
    "emoji 😀🚀👍🏽 🇩🇪 ❤️ 👨‍👩‍👧", "unseen: ꙮ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 ⨌ 🜲 ☃ ∮ E⋅da = Q", "\u0000nul\u0000", "\x7f\x01\x1b[0m",
    "x    \u180e\u205f y  \u180e", "zero\u200bwidth \ufeffbom \u00a0nbsp \u2028ls \u3000ideo \u180emvs \u0085nel \u2003em", "a\u0338b \u003e\u0338",
    "def f(x):\n    return x * 2\n", "for (int i = 0; i < n; i++) {\n\tsum += a[i];\n}", "x<<=3; y>>=1; z!=w && p||q",
    "print(f\"{value:08.3f}\")", "https://example.com/path?q=1&r=2#frag", "user@example.org", "!!!???...",
    "--- ### *** ___", "a" * 300, "ab" * 150 + " " + "猫" * 50, " " * 40 + "x", "\n" * 10,
    "supercalifragilisticexpialidocious antidisestablishmentarianism", "abc abcd xyz xyzz lll llll ümlaut <x><y><x>",
    "ab <x><y <x><y><x><y>", "a<|im_end|>\u0338b <\u0338<|im_start|>", "ümlautümlaut", "smörgåsbord crème brûlée coöperate façade niño",
]


def hf_raw_decode(tk, ids):  # the ByteLevel decoder's bytes before its lossy UTF-8 step (checked against decode)
    out = b""
    for i in ids:
        s = tk.id_to_token(i)
        out += bytes(b2u[ch] for ch in s) if all(ch in b2u for ch in s) else s.encode("utf-8")
    assert out.decode("utf-8", errors="replace") == tk.decode(ids, skip_special_tokens=False)
    return out.hex()


# random strings from pools of tricky characters (what a differential fuzz of 70k such strings checked; kept
# small here): Unicode spaces (U+180E is not White_Space), combining marks, case-folding letters, jamo, CJK, emoji,
# other-script digits, control characters, fragments of special tokens and contractions
pools = [
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789", "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
    " ", "  ", "\t", "\n", "\r\n", "\r",
    "\u00a0\u1680\u2000\u2003\u2009\u200a\u202f\u205f\u3000\u180e\u0085\u2028\u2029\u000b\u000c\u200b\ufeff\u001c\u001f",
    "\u0300\u0301\u0302\u0308\u0323\u0327\u0338\u0345\u05b0\u0610\u093c\u3099\u309a", "éèêëàâäôöûüçñåÅøæœßÉÀÇ",
    "ſKkK\u212a\u0130\u0131ẞ", "\u1100\u1161\u11a8\uac00\ud55c", "我们的模型在大規模数据上训练，。！東京は日本の首都ですカタカナ",
    "😀🚀👍🏽🇩🇪❤️👨‍👩‍👧✨", "٣٤٥①②③²³Ⅻ൬", "ΑαΒβΓγ русский עברית العربية हिन्दी ไทย",
    "\U0001d518\U0001d52b\u2a0c\U0001f732\u2603\u222e", "\u0000\u0001\u007f\u001b", "\u212b\u2126\u0344\u0f73\u1e14\uf900\U0002f800"]
frags = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|extra_3|>", "<|", "|>", "im_start", "'s", "'S", "'ll", "'LL",
         "'re", "'ſ", "<x>", "<x><y>", "<y>", "ümlaut", "abc", "xyz", "lll", "hello", " world", "def ", "    return"]
r = Lcg(2024)
for _ in range(40):
    t = ""
    for _ in range(r.next(25)):
        if r.next(100) < 15:
            t += frags[r.next(len(frags))]
        else:
            p = pools[r.next(len(pools))]
            t += "".join(p[r.next(len(p))] for _ in range(1 + r.next(4)))
    tests.append(unicodedata.normalize("NFD", t) if r.next(10) < 3 else t)

cases = []
for t in tests:
    ids = hf.encode(t, add_special_tokens=False).ids
    assert fast(t)["input_ids"] == ids, t  # transformers agrees with tokenizers
    tt = v1_encode(t)
    ts = v1_encode(t, enc_shuf)
    mi = mini.encode(t, add_special_tokens=False).ids
    c = {"text": t, "hf": ids, "tiktoken": tt, "shuffled": ts, "mini": mi,
         "hf_decode": hf_raw_decode(hf, ids),
         "tiktoken_decode": b"".join(enc.decode_single_token_bytes(i) for i in tt).hex(),
         "shuffled_decode": b"".join(enc_shuf.decode_single_token_bytes(i) for i in ts).hex(),
         "mini_decode": hf_raw_decode(mini, mi)}
    assert bytes.fromhex(c["tiktoken_decode"]) == unicodedata.normalize("NFC", t).encode("utf-8")
    assert bytes.fromhex(c["shuffled_decode"]) == unicodedata.normalize("NFC", t).encode("utf-8")
    cases.append(c)
# raw decodes that are not valid UTF-8 (the library keeps the bytes; HF would print U+FFFD): one byte token each
raw = {}
for tid in [0, 100, 150, 200, 255]:
    s = hf.id_to_token(tid)
    raw[str(tid)] = bytes(b2u[ch] for ch in s).hex()
    assert enc.decode_single_token_bytes(tid).hex() == raw[str(tid)]
res = {"tokenizers": tokenizers.__version__, "transformers": transformers.__version__, "tiktoken": tiktoken.__version__,
       "vocab": len(vocab), "hf_vocab_size": hf.get_vocab_size(with_added_tokens=True),
       "tiktoken_vocab_size": enc.n_vocab, "mini_vocab_size": mini.get_vocab_size(with_added_tokens=True),
       "specials": {s: hf.token_to_id(s) for s in SPECIALS},
       "tiktoken_specials": {s: enc.encode_single_token(s) for s in ["<|endoftext|>", "<|im_end|>", "<|extra_204|>"]},
       "sha256": {f: hashlib.sha256(open(os.path.join(a.out, f), "rb").read()).hexdigest()
                  for f in ("tokenizer.json", "qwen.tiktoken", "shuffled.tiktoken", "mini.json")},
       "raw_decode": raw, "cases": cases}
with open(os.path.join(a.out, "goldens.json"), "w", encoding="utf-8") as f:  # one case a line
    head = json.dumps({k: v for k, v in res.items() if k != "cases"}, ensure_ascii=False, indent=1)
    f.write(head[:-2] + ',\n "cases": [\n')
    f.write(",\n".join(json.dumps(c, ensure_ascii=False, separators=(",", ":")) for c in cases))
    f.write("\n ]\n}\n")
print("wrote", a.out, "-", len(cases), "cases")
