#!/usr/bin/env python3
"""Log-probabilities of greedy continuations by transformers for the fixture models: at each generated position the
log-softmax of the raw logits (float32; generate's output_logits, before any processor): the chosen id, its logprob
and the 10 most likely ids with theirs; and the prompt's own (prompt_steps: token t under the logits of position
t - 1, t >= 1; one forward pass), for OpenAI's echo and TGI's decoder_input_details. The reference of tests/cli/ref_serve_logprobs.sh (serve's OpenAI logprobs,
top_logprobs and TGI top_n_tokens): python make_logprobs_golden.py [--out fixtures/logprobs.json].
Needs torch + transformers (the versions of make_goldens.py)."""
import argparse, json, os, torch
from transformers import AutoModelForCausalLM
here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("--out", default=os.path.join(here, "fixtures", "logprobs.json"))
a = ap.parse_args()
prompts = [[1, 5, 9, 13], [42], [7, 7, 7, 3, 90, 11, 2, 64]]
N, TOP = 8, 10
res = {"transformers": __import__("transformers").__version__, "torch": torch.__version__, "max_new_tokens": N,
       "top": TOP, "cases": {}}
for case in ("qwen2_gqa_untied", "qwen2_tied", "qwen3_qknorm"):
    m = AutoModelForCausalLM.from_pretrained(os.path.join(here, "fixtures", case, "hf"), dtype=torch.float32).eval()
    outs = []
    for p in prompts:
        with torch.no_grad():
            o = m.generate(torch.tensor([p]), max_new_tokens=N, do_sample=False, eos_token_id=None, pad_token_id=0,
                           output_logits=True, return_dict_in_generate=True)
        ids = o.sequences[0, len(p):].tolist()
        steps = []
        for i, lg in enumerate(o.logits):
            lp = torch.log_softmax(lg[0].float(), dim=-1)
            v, ix = torch.topk(lp, TOP)
            steps.append({"id": ids[i], "logprob": lp[ids[i]].item(),
                          "top": [[int(x), float(y)] for x, y in zip(ix.tolist(), v.tolist())]})
        with torch.no_grad(): # the prompt's own: position t - 1's logits give prompt token t (echo, prefill details)
            plg = torch.log_softmax(m(torch.tensor([p])).logits[0].float(), dim=-1)
        psteps = []
        for t in range(1, len(p)):
            v, ix = torch.topk(plg[t - 1], TOP)
            psteps.append({"id": p[t], "logprob": plg[t - 1][p[t]].item(),
                           "top": [[int(x), float(y)] for x, y in zip(ix.tolist(), v.tolist())]})
        outs.append({"prompt": p, "steps": steps, "prompt_steps": psteps})
    res["cases"][case] = outs
json.dump(res, open(a.out, "w"), indent=1)
print("wrote", a.out)
