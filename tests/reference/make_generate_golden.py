#!/usr/bin/env python3
"""Greedy continuations by transformers (model.generate, do_sample=False, no eos) for the fixture models, the
reference of tests/cli/ref_generate.sh: python make_generate_golden.py [--out fixtures/generate.json].
Needs torch + transformers (the versions of make_goldens.py)."""
import argparse, json, os, torch
from transformers import AutoModelForCausalLM
here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("--out", default=os.path.join(here, "fixtures", "generate.json"))
a = ap.parse_args()
prompts = [[1, 5, 9, 13], [42], [7, 7, 7, 3, 90, 11, 2, 64]]
res = {"transformers": __import__("transformers").__version__, "torch": torch.__version__, "max_new_tokens": 16, "cases": {}}
for case in ("qwen2_gqa_untied", "qwen2_tied", "qwen3_qknorm"):
    m = AutoModelForCausalLM.from_pretrained(os.path.join(here, "fixtures", case, "hf"), dtype=torch.float32).eval()
    outs = []
    for p in prompts:
        with torch.no_grad():
            o = m.generate(torch.tensor([p]), max_new_tokens=16, do_sample=False, eos_token_id=None, pad_token_id=0)
        outs.append({"prompt": p, "ids": o[0, len(p):].tolist()})
    res["cases"][case] = outs
json.dump(res, open(a.out, "w"), indent=1)
print("wrote", a.out)
