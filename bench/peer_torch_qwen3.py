"""The FSDP2 peer (../shared/bench/peer_torch.py) for Qwen3 ([speed] issue item 4): HF transformers Qwen3 (q/k norm,
head_dim 128, no q/k/v bias) with random init from the real Qwen3 configs, trained with PyTorch FSDP2 exactly as
the Qwen2 peer: bf16 params + fp32 AdamW (fused), SDPA attention, optional activation checkpointing, clipping at 1.0.
Prints tokens/s, MFU (SPEC.md formula, head_dim from the config) and peak memory, one JSON line.
    torchrun --standalone --nproc-per-node N bench/peer_torch_qwen3.py --model qwen3-8b --seq 4096 --mbs 1 --ckpt 1"""
import os, time, json, argparse, torch, torch.distributed as dist
from transformers import Qwen3Config, Qwen3ForCausalLM

CFGS = {  # the Hugging Face Qwen3 dense configs (config.json of Qwen/Qwen3-*)
    "qwen3-0.6b": dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, intermediate_size=3072, tie_word_embeddings=True),
    "qwen3-1.7b": dict(hidden_size=2048, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8, intermediate_size=6144, tie_word_embeddings=True),
    "qwen3-4b": dict(hidden_size=2560, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8, intermediate_size=9728, tie_word_embeddings=True),
    "qwen3-8b": dict(hidden_size=4096, num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8, intermediate_size=12288, tie_word_embeddings=False),
}
ap = argparse.ArgumentParser()
ap.add_argument("--model", default="qwen3-8b"); ap.add_argument("--seq", type=int, default=4096)
ap.add_argument("--mbs", type=int, default=1); ap.add_argument("--steps", type=int, default=8)
ap.add_argument("--ckpt", type=int, default=1); ap.add_argument("--compile", type=int, default=0)
a = ap.parse_args()
dist.init_process_group("nccl"); rank = dist.get_rank(); world = dist.get_world_size()
torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
cfg = Qwen3Config(**CFGS[a.model], vocab_size=151936, head_dim=128, rope_theta=1e6, rms_norm_eps=1e-6,
                  max_position_embeddings=40960, attn_implementation="sdpa", torch_dtype=torch.bfloat16)
with torch.device("meta"):
    model = Qwen3ForCausalLM(cfg)
nparam = sum(p.numel() for p in model.parameters())
from torch.distributed.fsdp import fully_shard, MixedPrecisionPolicy
mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
if a.ckpt:
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
for layer in model.model.layers:
    if a.compile: layer.compile()
    fully_shard(layer, mp_policy=mp)
fully_shard(model, mp_policy=mp)
model.to_empty(device="cuda")
with torch.no_grad():
    for name, p in model.named_parameters():
        if "norm" in name: p.fill_(1.0)
        else: p.normal_(0, 0.02)
model.train()
opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01, fused=True)
L, S = cfg.num_hidden_layers, a.seq
hd = cfg.head_dim
n_matmul = nparam if cfg.tie_word_embeddings else nparam - cfg.vocab_size * cfg.hidden_size
flops_tok = 6 * n_matmul + 12 * L * cfg.num_attention_heads * hd * S  # SPEC.md convention
torch.manual_seed(rank)
times = []
for step in range(a.steps):
    x = torch.randint(0, cfg.vocab_size, (a.mbs, S), device="cuda")
    torch.cuda.synchronize(); t0 = time.time()
    out = model(input_ids=x, labels=x)
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step(); opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize(); times.append(time.time() - t0)
dt = sorted(times[2:])[len(times[2:]) // 2]
tok = a.mbs * S * world / dt
mfu = tok * flops_tok / (989e12 * world)
if rank == 0:
    print(json.dumps(dict(peer="torch-fsdp2+hf", model=a.model, params=nparam, world=world, seq=S, mbs=a.mbs, ckpt=a.ckpt,
        compile=a.compile, step_s=round(dt, 4), tok_s=round(tok), mfu=round(mfu, 4),
        peak_mem_gb=round(torch.cuda.max_memory_allocated() / 2**30, 1))), flush=True)
dist.destroy_process_group()
