#!/usr/bin/env bash
# log.wall_clock_breakdown = true: every step's metrics.jsonl record carries a "breakdown" object (phases, op classes,
# waiting, offload, per op-table entry) whose phases add up to the step time, recomputation shows with activation checkpointing, the
# host AdamW's time shows with offload (and in host_adamw_s / host_adamw_wait_s, profiled or not), rank 0 prints a "time (s/step ...)" line with the progress line; and the
# profiled run's losses are those of the unprofiled one, bit for bit (the wrappers only synchronise and time).
. "$SRC/tests/mpi_common.sh"
lay=(--set zero_optimization.stage=3 --set zero_optimization.offload_optimizer.device=cpu
     --set zero_optimization.offload_param.device=cpu --set activation_checkpointing=true --set log.steps_per_print=1)
run plain 2 "${lay[@]}" || exit 1
run prof 2 "${lay[@]}" --set log.wall_clock_breakdown=true || exit 1
grep -q "^time (s/step" prof.out || { echo "FAIL: no time line in the output"; tail -5 prof.out; exit 1; }
grep -q "^time (s/step" plain.out && { echo "FAIL: time line without wall_clock_breakdown"; exit 1; }
python3 - plain/l/metrics.jsonl prof/l/metrics.jsonl <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
b = [json.loads(l) for l in open(sys.argv[2]) if '"loss"' in l]
assert len(a) == len(b) == 5, (len(a), len(b))
assert [x["loss"] for x in a] == [y["loss"] for y in b], "profiling changed the losses"
assert all("breakdown" not in x for x in a), "breakdown object without wall_clock_breakdown"
phases = ["data_s", "forward_s", "backward_s", "reduce_s", "norm_s", "update_s"]
for r in b:
    t = r["breakdown"]
    for k in phases + ["op_gemm_s", "op_attention_s", "op_pointwise_s", "op_head_s", "op_recompute_s",
                       "waiting_s", "offload_adamw_s", "offload_wait_s"]:
        assert k in t and t[k] >= 0, (k, t)
    total = sum(t[k] for k in phases)
    assert 0.5 * r["step_time_s"] <= total <= 1.05 * r["step_time_s"] + 1e-3, (total, r["step_time_s"])
    assert t["forward_s"] > 0 and t["backward_s"] > 0 and t["op_gemm_s"] > 0 and t["op_attention_s"] > 0, t
    assert t["op_recompute_s"] > 0, "activation checkpointing recomputes: op_recompute_s must be > 0"
    assert t["op_gemm_s"] + t["op_attention_s"] + t["op_pointwise_s"] + t["op_head_s"] + t["op_recompute_s"] \
        <= t["forward_s"] + t["backward_s"] + 1e-4, t
    ops = t["ops"]  # per op-table entry: the classes are their sums
    assert ops["matmul_fwd"]["calls"] > 0 and ops["matmul_bwd"]["calls"] > 0 and ops["rmsnorm_fwd"]["calls"] > 0, ops
    classes = sum(t[k] for k in ["op_gemm_s", "op_attention_s", "op_pointwise_s", "op_head_s", "op_recompute_s",
                                 "op_optimizer_s"])
    entries = sum(e["s"] for e in ops.values())
    assert abs(classes - entries) <= 1e-6 + 1e-6 * classes, (classes, entries)
assert sum(r["breakdown"]["offload_adamw_s"] for r in b) > 0, "the host AdamW's time must show with offload"
# without the profile too: every train record has the host AdamW's time and the trainer's waits for it, the
# profile's own figures where it is on
for x in a + b:
    assert x["host_adamw_s"] >= 0 and x["host_adamw_wait_s"] >= 0, x
assert sum(x["host_adamw_s"] for x in a) > 0, "host_adamw_s must show with offload"
assert sum(x["host_adamw_wait_s"] for x in a) <= sum(x["step_time_s"] for x in a), a
for y in b:
    assert y["host_adamw_s"] == y["breakdown"]["offload_adamw_s"], y
    assert y["host_adamw_wait_s"] == y["breakdown"]["offload_wait_s"], y
print("PASS: 5 steps profiled, phases add up, losses unchanged")
PY
