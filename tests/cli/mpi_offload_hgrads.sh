#!/usr/bin/env bash
# offload_optimizer.gradients = host (src/zero/zero_hgrad.c: each unit's reduced gradients leave for host memory as
# its reduce-scatter completes; with offload_param and one micro-batch they land in the node copy's range) gives the
# trajectory of the device-resident shard and of no offload, bit for bit on CPU ranks: per-step losses, gradient
# norms and validation losses equal, the final checkpoints' master weights and Adam moments identical (h5diff), over
# 1-2 ranks, stages 2-3 (3 with offload_param), accumulation 1 and 2. Then fp16 with an injected overflow (NaN
# gradients on rank 0 at step 2): the skipped step leaves master, moments and the node copy untouched, so the run
# equals the device-shard run with the same fault, and a run that then resumes from its checkpoint (node copy read
# back) continues identically. With one rank and accumulation the host adds go through staging pieces of 777
# elements (QWENFT_ZHG_STAGE_N), several per unit, on the accumulation thread; metrics.jsonl has host_grad_wait_s
# with the shard on the host only. The header says where the gradients live, and auto on CPU
# ranks keeps them on the device. A deck asking for host gradients where they cannot be is refused (exit 2) naming
# the key.
. "$SRC/tests/mpi_common.sh"
command -v h5diff > /dev/null || { echo "SKIP: h5diff (hdf5-tools) not installed"; exit 77; }
common=(--set checkpoint.every_steps=2 --set eval.every_steps=2)
fails=0
for np in 1 2; do
  for stage in 2 3; do
    for ga in 1 2; do
      micro=$((24 / (np * ga)))
      lay=(--set zero_optimization.stage=$stage --set train_micro_batch_size_per_gpu=$micro --set gradient_accumulation_steps=$ga)
      off=(--set zero_optimization.offload_optimizer.device=cpu)
      [ "$stage" = 3 ] && off+=(--set zero_optimization.offload_param.device=cpu)
      n="np${np}_s${stage}_ga${ga}"
      run "${n}_none" "$np" "${lay[@]}" "${common[@]}" || { fails=$((fails + 1)); continue; }
      run "${n}_dev" "$np" "${lay[@]}" "${off[@]}" "${common[@]}" || { fails=$((fails + 1)); continue; }
      # one rank with accumulation: staging slots of 777 elements (a test hook), so that each accumulated piece
      # turns through the staging ring (at most 64 slots) several times, slots reused while the thread adds
      sn=""; [ "$np" = 1 ] && [ "$ga" = 2 ] && sn=777
      QWENFT_ZHG_STAGE_N=$sn run "${n}_host" "$np" "${lay[@]}" "${off[@]}" --set zero_optimization.offload_optimizer.gradients=host \
        "${common[@]}" || { fails=$((fails + 1)); continue; }
      grep -q "gradient shard lives on the device until the step (offload_optimizer.gradients; auto: no device budget" \
        "${n}_dev.out" || { echo "FAIL: ${n}_dev: header"; grep "gradient shard" "${n}_dev.out"; fails=$((fails + 1)); }
      want="in the step's host buffer"
      [ "$stage" = 3 ] && [ "$ga" = 1 ] && want="in the node copy's range"
      [ "$stage" = 3 ] && [ "$ga" = 2 ] && want="a pinned buffer of its own"
      grep -q "gradient shard lives in host memory, $want" "${n}_host.out" ||
        { echo "FAIL: ${n}_host: header does not say '$want'"; grep "gradient shard" "${n}_host.out"; fails=$((fails + 1)); }
      # metrics.jsonl: the trainer's waits for the host accumulation, with the shard on the host only
      python3 -c '
import json, sys
has = lambda f: [("host_grad_wait_s" in r, r.get("host_grad_wait_s", 0) >= 0) for r in map(json.loads, open(f)) if "loss" in r]
h, d = has(sys.argv[1]), has(sys.argv[2])
sys.exit(0 if h and all(a and b for a, b in h) and not any(a for a, _ in d) else 1)' "${n}_host/l/metrics.jsonl" "${n}_dev/l/metrics.jsonl" ||
        { echo "FAIL: ${n}: host_grad_wait_s not in every step of the host run's metrics, or in the device run's"; fails=$((fails + 1)); }
      same_metrics "${n}_dev" "${n}_host" || fails=$((fails + 1))
      same_metrics "${n}_none" "${n}_host" || fails=$((fails + 1))
      same_ckpt "${n}_dev" "${n}_host" || fails=$((fails + 1))
      same_ckpt "${n}_none" "${n}_host" || fails=$((fails + 1))
    done
  done
done
# fp16 and an injected overflow at step 2 (rank 0): skipped, nothing changed, the node copy holds parameters again
fp16b=(--set fp16.enabled=true --set fp16.initial_scale_power=4 --set zero_optimization.stage=3
      --set zero_optimization.offload_optimizer.device=cpu --set zero_optimization.offload_param.device=cpu)
for np in 1 2; do
  fp16=("${fp16b[@]}" --set train_micro_batch_size_per_gpu=$((24 / np))) # one micro-batch: gradients in the node copy
  QWENFT_INJECT_FAULT=0:2:nan run "fp16_np${np}_dev" "$np" "${fp16[@]}" "${common[@]}" || { fails=$((fails + 1)); continue; }
  QWENFT_INJECT_FAULT=0:2:nan run "fp16_np${np}_host" "$np" "${fp16[@]}" \
    --set zero_optimization.offload_optimizer.gradients=host "${common[@]}" || { fails=$((fails + 1)); continue; }
  python3 -c '
import json, sys
r = [json.loads(l) for l in open(sys.argv[1]) if "\"train\"" in l]
s = [x["step"] for x in r if x["skipped"]]
sys.exit(0 if s == [2] else 1)' "fp16_np${np}_host/l/metrics.jsonl" || { echo "FAIL: fp16_np${np}_host: step 2 not the one skipped"; fails=$((fails + 1)); }
  same_metrics "fp16_np${np}_dev" "fp16_np${np}_host" || fails=$((fails + 1))
  same_ckpt "fp16_np${np}_dev" "fp16_np${np}_host" || fails=$((fails + 1))
done
# the skipped step's checkpoint (step 2) resumed to 5 == the uninterrupted run
s2=fp16_np2_host/ck/step-00000002.h5
mkdir -p fp16_res/ck
if [ -f "$s2" ]; then
  cp "$s2" fp16_res/ck/ && printf 'step-00000002.h5\n' > fp16_res/ck/latest
  run fp16_res 2 "${fp16b[@]}" --set train_micro_batch_size_per_gpu=12 --set zero_optimization.offload_optimizer.gradients=host "${common[@]}" ||
    fails=$((fails + 1))
  grep -q "resuming" fp16_res.out || { echo "FAIL: fp16_res did not resume"; fails=$((fails + 1)); }
  same_ckpt fp16_np2_host fp16_res || fails=$((fails + 1))
else
  echo "FAIL: no step-2 checkpoint in fp16_np2_host/ck"; ls fp16_np2_host/ck; fails=$((fails + 1))
fi
# host gradients where they cannot be: refused, naming the key
set +e
"$QWENFT" train deck.cfg --set zero_optimization.stage=1 --set zero_optimization.offload_optimizer.device=cpu \
  --set zero_optimization.offload_optimizer.gradients=host --set log.dir=bad/l --set checkpoint.dir=bad/ck > bad.out 2>&1
rc=$?
set -e
[ "$rc" = 2 ] && grep -q "zero_optimization.offload_optimizer.gradients" bad.out && grep -q "stage >= 2" bad.out ||
  { echo "FAIL: stage 1 + gradients=host: rc=$rc"; cat bad.out; fails=$((fails + 1)); }
[ "$fails" -eq 0 ] && echo "PASS: host gradients == device shard == no offload, bit for bit (8 layouts); fp16 overflow skipped with nothing changed (1-2 ranks), resumed exactly; refused where impossible" || { echo "FAIL: $fails"; exit 1; }
