#!/usr/bin/env python3
"""bench/make_text_corpus.py OUT.jsonl [MEGABYTES=8] — a real-text corpus for training benches, from text every
machine with Python has: the CPython standard library's own modules (source, docstrings and comments; PSF licence),
one {"text": ...} record per module, in sorted path order, skipping the test suites and site-packages, until
MEGABYTES of text. Deterministic for a given Python version (printed on stderr with the counts). Tokenize it with
`qwen-ft prepare --in OUT.jsonl --out D.h5 --tokenizer DIR` (bench/fp8_bench.sh's loss parts take D.h5 as DATA)."""
import json, os, sys, sysconfig

def main():
    if len(sys.argv) < 2:
        sys.exit("usage: make_text_corpus.py OUT.jsonl [MEGABYTES=8]")
    out, limit = sys.argv[1], int(float(sys.argv[2] if len(sys.argv) > 2 else 8) * 1e6)
    lib = sysconfig.get_paths()["stdlib"]
    files = []
    for d, dirs, names in os.walk(lib):
        rel = os.path.relpath(d, lib)
        dirs[:] = sorted(x for x in dirs if x not in ("test", "tests", "idle_test", "site-packages", "dist-packages",
                                                       "__pycache__", "lib2to3"))
        files += [os.path.join(rel, n) for n in sorted(names) if n.endswith(".py")]
    total = n = 0
    with open(out, "w") as f:
        for rel in sorted(files):
            try:
                text = open(os.path.join(lib, rel), encoding="utf-8").read()
            except (UnicodeDecodeError, OSError):
                continue
            if len(text) < 200:
                continue
            f.write(json.dumps({"text": text}) + "\n")
            total += len(text.encode())
            n += 1
            if total >= limit:
                break
    print(f"make_text_corpus: Python {sys.version.split()[0]} stdlib ({lib}): {n} modules, {total} bytes -> {out}",
          file=sys.stderr)

if __name__ == "__main__":
    main()
