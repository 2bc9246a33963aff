"""DeepSpeed's CPU Adam (deepspeed.ops.adam.DeepSpeedCPUAdam, the cpu_adam op DeepSpeed builds at first use) and
torch's fused CPU AdamW on the same cores and sizes as bench/adamw_bench: G parameters/s, best of REPEATS.
    python3 bench/adamw_bench_ds.py [N_MILLION=512] [THREADS] [REPEATS=5]
DeepSpeed's step takes fp32 parameters and fp32 gradients (its offload copies the 16-bit gradients into fp32 host
buffers first and the parameters back to the device after, both outside this timing); qwen-ft's pass includes
the widening of the act gradients and the rounding of the parameters. One JSON line per implementation."""
import json, os, sys, time
n = int(float(sys.argv[1] if len(sys.argv) > 1 else 512) * 1e6)
threads = int(sys.argv[2]) if len(sys.argv) > 2 else os.cpu_count()
reps = int(sys.argv[3]) if len(sys.argv) > 3 else 5
import torch
torch.set_num_threads(threads)
def bench(name, make_opt, p):
    opt = make_opt([p])
    p.grad = torch.full_like(p, 1e-3)
    best = 0.0
    for _ in range(reps):
        t0 = time.perf_counter()
        opt.step()
        best = max(best, n / (time.perf_counter() - t0) / 1e9)
    print(json.dumps({"impl": name, "dtype": "fp32", "threads": threads, "n": n, "gparams_per_s": round(best, 3)}),
          flush=True)
p = torch.nn.Parameter(torch.zeros(n))
bench("torch.optim.AdamW(fused=True) cpu", lambda ps: torch.optim.AdamW(ps, lr=1e-5, weight_decay=0.01, fused=True), p)
try:
    from deepspeed.ops.adam import DeepSpeedCPUAdam
    bench("DeepSpeedCPUAdam (cpu_adam)", lambda ps: DeepSpeedCPUAdam(ps, lr=1e-5, weight_decay=0.01, adamw_mode=True), p)
except Exception as e:  # say so: the comparison is incomplete
    print(json.dumps({"impl": "DeepSpeedCPUAdam (cpu_adam)", "error": repr(e)[:300]}), flush=True)
