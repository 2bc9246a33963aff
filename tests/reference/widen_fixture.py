#!/usr/bin/env python3
"""widen_fixture.py SRC_HF DST: a copy of a fixture HF model with a 2048-row embedding (and lm_head when untied)
and a 512-token context, so that the fixture tokenizer's 2003 ids (ChatML included) are in its vocabulary. The new
rows are drawn from a seeded N(0, 0.02), as the fixture's own. Pure Python (no numpy, torch or safetensors).
Used by tests/cli/unit_generate_batch.sh and tests/cli/gpu_generate.sh."""
import json, os, random, struct, sys
src, dst = sys.argv[1:3]
os.makedirs(dst, exist_ok=True)
cfg = json.load(open(f"{src}/config.json")); cfg["vocab_size"] = 2048; cfg["max_position_embeddings"] = 512
json.dump(cfg, open(f"{dst}/config.json", "w"), indent=2)
b = open(f"{src}/model.safetensors", "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
data = b[8 + n:]; rnd = random.Random(7); out = {}; blobs = []; off = 0
for name in sorted(k for k in h if k != "__metadata__"):
    t = h[name]; raw = data[t["data_offsets"][0]:t["data_offsets"][1]]; shape = list(t["shape"])
    if name in ("model.embed_tokens.weight", "lm_head.weight"):
        extra = (2048 - shape[0]) * shape[1]
        raw += struct.pack(f"<{extra}f", *(rnd.gauss(0, 0.02) for _ in range(extra))); shape[0] = 2048
    out[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(raw)]}; blobs.append(raw); off += len(raw)
hdr = json.dumps(out).encode(); hdr += b" " * (-len(hdr) % 8)
open(f"{dst}/model.safetensors", "wb").write(struct.pack("<Q", len(hdr)) + hdr + b"".join(blobs))
