#!/usr/bin/env python3
"""compare_goldens.py NEW_DIR [OLD_DIR] — goldens regenerated on another machine (make_goldens.py --out NEW_DIR)
against the committed fixtures: every number of every golden.json and every tensor of golden.safetensors to 1e-5
relative of the tensor's max. Needs numpy + safetensors (the GPU machine has them)."""
import json, math, os, sys
new = sys.argv[1]
old = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
def walk(a, b, path, out):
    if isinstance(a, dict):
        for k in a: walk(a[k], b.get(k) if isinstance(b, dict) else None, f"{path}.{k}", out)
    elif isinstance(a, list):
        for i, x in enumerate(a): walk(x, b[i] if isinstance(b, list) and i < len(b) else None, f"{path}[{i}]", out)
    elif isinstance(a, (int, float)) and not isinstance(a, bool):
        if b is None: out.append((path, math.inf)); return
        out.append((path, abs(a - b) / max(abs(a), 1e-30) if a != b else 0.0))
worst, bad = 0.0, 0
for case in sorted(os.listdir(old)):
    if not os.path.isdir(os.path.join(old, case)): continue
    diffs = []
    walk(json.load(open(os.path.join(old, case, "golden.json"))), json.load(open(os.path.join(new, case, "golden.json"))), case, diffs)
    w = max(d for _, d in diffs)
    try:
        from safetensors.numpy import load_file
        import numpy as np
        a, b = load_file(os.path.join(old, case, "golden.safetensors")), load_file(os.path.join(new, case, "golden.safetensors"))
        tw = max(float(np.max(np.abs(a[k] - b[k]))) / max(float(np.max(np.abs(a[k]))), 1e-30) for k in a)
    except ImportError:
        tw = float("nan")
    print(f"{case:<18} golden.json max rel diff {w:.2e}; tensors {tw:.2e}")
    worst = max(worst, w, tw if tw == tw else 0)
    bad += w > 1e-5 or tw > 1e-5
print("PASS" if not bad else "FAIL", f"(worst {worst:.2e})")
sys.exit(1 if bad else 0)
