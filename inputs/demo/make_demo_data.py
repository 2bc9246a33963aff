#!/usr/bin/env python3
"""Writes the bundled demo dataset (inputs/demo/{train,valid}.jsonl): pre-tokenized byte-level records
(token = byte value, 256 = end of text) of small arithmetic and counting exercises, which a tiny model learns
in a few hundred steps on CPU ranks. Labels mask the question so only the answer is trained in half the records,
exercising loss masks. Deterministic: python3 make_demo_data.py [outdir]."""
import json, random, sys, os

EOT = 256

def record(rng, i):
    kind = i % 3
    if kind == 0:
        a, b = rng.randrange(100), rng.randrange(100)
        q, ans = f"{a}+{b}=", f"{a + b}\n"
    elif kind == 1:
        s = rng.randrange(50)
        q, ans = f"count {s}:", " ".join(str(s + k) for k in range(rng.randrange(3, 9))) + "\n"
    else:
        w = rng.choice(["qwen", "mpi", "cuda", "hdf5", "slurm", "zero", "nccl", "adamw"])
        q, ans = f"reverse {w}:", w[::-1] + "\n"
    ids = list(q.encode()) + list(ans.encode()) + [EOT]
    rec = {"input_ids": ids}
    if i % 2 == 0:  # train only the answer (HF-style labels, -100 = not a target)
        rec["labels"] = [-100] * len(q.encode()) + ids[len(q.encode()):]
    return rec

def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    rng = random.Random(20261130)
    for name, n in (("train", 6000), ("valid", 300)):
        with open(os.path.join(out, f"{name}.jsonl"), "w") as f:
            for i in range(n):
                f.write(json.dumps(record(rng, i), separators=(",", ":")) + "\n")

if __name__ == "__main__":
    main()
