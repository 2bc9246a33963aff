#!/usr/bin/env python3
"""Random-token documents for the throughput benchmarks: bench/make_data.py OUT.jsonl ROWS SEQ [VOCAB] [SEED].
Each record is one document of exactly SEQ tokens, so a packed row is one full-length sequence, as the peer
(../shared/bench/peer_torch.py: torch.randint, labels = inputs) trains on."""
import json, random, sys
out, rows, seq = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
vocab = int(sys.argv[4]) if len(sys.argv) > 4 else 151936
rng = random.Random(int(sys.argv[5]) if len(sys.argv) > 5 else 0)
with open(out, "w") as f:
    for _ in range(rows):
        f.write(json.dumps({"input_ids": [rng.randrange(vocab) for _ in range(seq)]}, separators=(",", ":")) + "\n")
