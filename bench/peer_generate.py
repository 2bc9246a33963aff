#!/usr/bin/env python3
"""peer_generate.py PRESET BATCH PROMPT_LEN NEW_TOKENS: transformers' generate on one GPU as the peer of
`qwen-ft generate --timing` (bench/generate_bench.sh): the preset's architecture randomly initialised, bf16,
SDPA attention, greedy, exactly NEW_TOKENS new tokens (min_new_tokens), dynamic and static KV cache. Prints one JSON
line per cache kind: time to first token (a generate of 1 new token) and decode tokens/s per row."""
import json, sys, time
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

PRESETS = {  # vocab, hidden, ffn, layers, heads, kv heads, tied, rope theta, rms eps (io/model_config.c)
    "qwen2.5-0.5b": (151936, 896, 4864, 24, 14, 2, True, 1e6, 1e-6),
    "qwen2.5-1.5b": (151936, 1536, 8960, 28, 12, 2, True, 1e6, 1e-6),
    "qwen2.5-7b": (152064, 3584, 18944, 28, 28, 4, False, 1e6, 1e-6),
    "qwen2.5-14b": (152064, 5120, 13824, 48, 40, 8, False, 1e6, 1e-5),
}
name, B, T, N = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
V, C, F, L, H, KV, tied, theta, eps = PRESETS[name]
cfg = Qwen2Config(vocab_size=V, hidden_size=C, intermediate_size=F, num_hidden_layers=L, num_attention_heads=H,
                  num_key_value_heads=KV, tie_word_embeddings=tied, rope_theta=theta, rms_norm_eps=eps,
                  max_position_embeddings=32768, attn_implementation="sdpa")
torch.manual_seed(1)
with torch.device("cuda"):
    model = Qwen2ForCausalLM(cfg).to(torch.bfloat16).eval()
ids = torch.randint(0, 150000, (B, T), device="cuda")
mask = torch.ones_like(ids)
def run(n, cache):
    kw = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0, attention_mask=mask)
    if cache: kw["cache_implementation"] = cache
    torch.cuda.synchronize(); t = time.perf_counter()
    with torch.no_grad(): model.generate(ids, **kw)
    torch.cuda.synchronize(); return time.perf_counter() - t
for cache in (None, "static"):
    try:
        run(2, cache)  # warm-up (compilation of the static cache path included)
        ttft = min(run(1, cache) for _ in range(3)); total = run(N, cache)
        print(json.dumps({"impl": "transformers", "cache": cache or "dynamic", "model": name, "batch": B, "prompt": T,
                          "new": N, "ttft_s": round(ttft, 4), "decode_tok_s_per_row": round((N - 1) / (total - ttft), 1),
                          "decode_tok_s": round(B * (N - 1) / (total - ttft), 1)}), flush=True)
    except Exception as ex:  # a transformers without the static cache for this model
        print(json.dumps({"impl": "transformers", "cache": cache or "dynamic", "error": str(ex)[:200]}), flush=True)
