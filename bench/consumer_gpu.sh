#!/usr/bin/env bash
# bench/consumer_gpu.sh PART — the [consumer] issue's measurements on the GPU machine, in parts that each fit one
# device call (docs/performance.md records them). Run from the repo root after `. .devdeps/env.sh`, with QWENFT set
# to the CUDA build's binary and ADAMW_BENCH to its adamw_bench; results in $OUT/offload.jsonl and $OUT/adamw.jsonl.
#   tests  the gpu label (ctest), then the host AdamW bf16/fp16/fp32 on all cores
#   3b     Qwen2.5-3B seq 512 micro 16, full offload, cap 24: qwen-ft bf16 and fp16 (and bf16 with one core left to
#          the trainer's thread: host AdamW on cores - 1 threads)
#   peer3b the DeepSpeed peer at the same settings, bf16 and fp16, and DeepSpeed's cpu_adam on the same cores
#   7b     Qwen2.5-7B seq 512 micro 8, full offload: cap 24 and cap 12 (gradients to the host by the memory plan)
#   accum  Qwen2.5-3B seq 512 micro 16, accumulation 16: full offload (cap 24) against no offload
#   dmon   the monitor's figures against nvidia-smi dmon's over the same seconds: Qwen2.5-3B full offload (cap 24),
#          12 steps, metrics.jsonl's gpu_util_mean and pcie bytes against dmon's sm % and rxpci/txpci MB/s over
#          the seconds of steps 3.. (the run's metrics.jsonl times them), else over the seconds with sm > 0 and
#          those with sm >= 20; in $OUT/dmon_vs_monitor.txt (dmon's own lines in $OUT/dmon.txt)
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp}
export OUT=$out TLIMIT=${TLIMIT:-300}
cores=$(nproc)
case "${1:-}" in
  tests)
    ctest --test-dir "${BUILD:-build-cuda}" -L gpu --output-on-failure 2>&1 | tail -40
    lscpu | grep -E 'Model name|^CPU\(s\)|Thread|Socket' | tee "$out/cpu.txt"
    for dt in bf16 fp16 fp32; do "$ADAMW_BENCH" 512 "$cores" "$dt" 3 | tee -a "$out/adamw.jsonl"; done ;;
  3b)
    S=qwen2.5-3b:512:16:1:all:1
    bash "$root/bench/offload_bench.sh" "$S:bf16:24:5" "$S:fp16:24:5"
    OMP_NUM_THREADS=$((cores - 1)) bash "$root/bench/offload_bench.sh" "$S:bf16:24:5" ;;
  peer3b)
    bash "$root/bench/offload_peer.sh" 4 qwen2.5-3b:512:16:1:all:1:bf16 qwen2.5-3b:512:16:1:all:1:fp16
    PYTHONPATH=/tmp/ds-site python3 "$root/bench/adamw_bench_ds.py" 512 "$cores" 3 2>&1 | grep '^{' | tee -a "$out/adamw.jsonl" ;;
  7b)
    S=qwen2.5-7b:512:8:1:all:1:bf16
    bash "$root/bench/offload_bench.sh" "$S:24:5" "$S:12:5" ;;
  accum)
    bash "$root/bench/offload_bench.sh" qwen2.5-3b:512:16:1:all:16:bf16:24:3 qwen2.5-3b:512:16:1:none:16:bf16:0:3 ;;
  dmon)
    nvidia-smi dmon -s ut -d 1 -o T > "$out/dmon.txt" 2>&1 &
    dm=$!
    bash "$root/bench/offload_bench.sh" qwen2.5-3b:512:16:1:all:1:bf16:24:12
    kill $dm 2>/dev/null; wait $dm 2>/dev/null
    python3 - "$out" <<'PY' | tee "$out/dmon_vs_monitor.txt"
import datetime, json, os, re, sys
o = sys.argv[1]
# -s ut -o T: "#Time gpu sm mem enc dec jpg ofa rxpci txpci" then "#HH:MM:SS Idx % ... MB/s" (no space after '#',
# repeated every few dozen lines); the first '#' line is the header, every other '#' line is skipped
lines = [l for l in open(f"{o}/dmon.txt", errors="replace") if l.strip()]
hdr = next((l.lstrip("#").split() for l in lines if l.startswith("#")), None)
if not hdr or not {"Time", "sm", "rxpci", "txpci"} <= set(hdr):
    sys.exit(f"{o}/dmon.txt: no '#Time ... sm ... rxpci txpci' header line (nvidia-smi dmon -s ut -o T): {hdr}")
ix = {k: i for i, k in enumerate(hdr)}
rows = [r for r in (l.split() for l in lines if not l.startswith("#")) if len(r) == len(hdr)]
num = lambda v: float(v) if re.fullmatch(r"[0-9.]+", v) else 0.0
sec = lambda hms: sum(int(x) * m for x, m in zip(hms.split(":"), (3600, 60, 1)))
def show(what, sel):
    n = max(1, len(sel))
    sm, rx, tx = (sum(num(r[ix[k]]) for r in sel) / n for k in ("sm", "rxpci", "txpci"))
    print(f"dmon over {len(sel)} {what}: sm {sm:.1f}%, rxpci {rx / 1e3:.2f} GB/s, txpci {tx / 1e3:.2f} GB/s "
          f"(H2D+D2H {(rx + tx) / 1e3:.2f})")
# the steps' own seconds where the run's metrics.jsonl (offload_bench.sh keeps it) gives their times: each record's
# "time" (UTC) ends a step of step_time_s; dmon -o T prints this machine's local time; the steps after the second,
# as the monitor's means below
mpath = f"{o}/qwen-ft-qwen2.5-3b_512_16_1_all_1_bf16_24_12.metrics.jsonl"
steps = [json.loads(l) for l in open(mpath) if '"loss"' in l] if os.path.exists(mpath) else []
steps = [s for s in steps[2:] if s.get("time") and s.get("step_time_s")]
if steps:
    end = lambda s: datetime.datetime.fromisoformat(s["time"].replace("Z", "+00:00")).astimezone()
    t1, t0 = end(steps[-1]), end(steps[0]) - datetime.timedelta(seconds=steps[0]["step_time_s"])
    s0, s1 = t0.hour * 3600 + t0.minute * 60 + t0.second, t1.hour * 3600 + t1.minute * 60 + t1.second + 1
    inside = [r for r in rows if s0 <= sec(r[ix["Time"]]) <= s1]
    what = f"seconds of steps {steps[0]['step']}-{steps[-1]['step']} ({t0:%H:%M:%S}-{t1:%H:%M:%S}, metrics.jsonl's times)"
    if inside: show(what, inside)
    else: print(f"dmon has none of the {what}: its clock differs?"); steps = []
if not steps:  # no step times: the seconds the GPU was busy at all, and those of the training steps (init: 0-7%)
    show("busy seconds (sm > 0)", [r for r in rows if num(r[ix["sm"]]) > 0])
    show("seconds with sm >= 20 (the training steps; the init seconds show 0-7%)",
         [r for r in rows if num(r[ix["sm"]]) >= 20])
r = [json.loads(l) for l in open(f"{o}/offload.jsonl") if "monitor" in l][-1]["monitor"]
print(f"monitor (metrics.jsonl, mean of the steps after the second): gpu_util_mean {r['gpu_util_mean']}, "
      f"H2D {r['h2d_gbs']} GB/s, D2H {r['d2h_gbs']} GB/s, pcie_gbs {r['pcie_gbs']}")
PY
    ;;
  *) echo "usage: bench/consumer_gpu.sh tests|3b|peer3b|7b|accum|dmon" >&2; exit 2 ;;
esac
