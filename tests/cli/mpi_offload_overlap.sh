#!/usr/bin/env bash
# The overlapped offload step (src/zero/zero_offload.c: host AdamW unit by unit while the next forward runs) gives the
# trajectory of the step completed in place (QWENFT_OFFLOAD_OVERLAP=0) and of the same layout without offload, bit
# for bit on CPU ranks: per-step losses and gradient norms equal as printed (%.10g), and the final checkpoints'
# master weights and Adam moments identical (h5diff). Checkpoints and evaluations every 2 steps land while a step
# is in flight (they complete it first).
. "$SRC/tests/mpi_common.sh"
command -v h5diff > /dev/null || { echo "SKIP: h5diff (hdf5-tools) not installed"; exit 77; }
common=(--set checkpoint.every_steps=2 --set eval.every_steps=2)
fails=0
for np in 1 2 3; do
  for stage in 2 3; do
    for ga in 1 2; do
      micro=$((24 / (np * ga)))
      lay=(--set zero_optimization.stage=$stage --set train_micro_batch_size_per_gpu=$micro --set gradient_accumulation_steps=$ga)
      off=(--set zero_optimization.offload_optimizer.device=cpu)
      [ "$stage" = 3 ] && off+=(--set zero_optimization.offload_param.device=cpu)
      n="np${np}_s${stage}_ga${ga}"
      run "${n}_none" "$np" "${lay[@]}" "${common[@]}" || { fails=$((fails + 1)); continue; }
      run "${n}_over" "$np" "${lay[@]}" "${off[@]}" "${common[@]}" || { fails=$((fails + 1)); continue; }
      QWENFT_OFFLOAD_OVERLAP=0 run "${n}_inplace" "$np" "${lay[@]}" "${off[@]}" "${common[@]}" || { fails=$((fails + 1)); continue; }
      # stage 3 on one node overlaps; stage 2 overlaps on one rank only (the updated shards travel by MPI)
      want="overlapped with the next forward"
      if [ "$stage" = 2 ] && [ "$np" -gt 1 ]; then want="completed inside each step"; fi
      grep -q "$want" "${n}_over.out" || { echo "FAIL: ${n}_over: header does not say '$want'"; grep offload: "${n}_over.out"; fails=$((fails + 1)); }
      grep -q "completed inside each step" "${n}_inplace.out" || { echo "FAIL: ${n}_inplace: not completed in place"; fails=$((fails + 1)); }
      same_metrics "${n}_inplace" "${n}_over" || fails=$((fails + 1))
      same_metrics "${n}_none" "${n}_over" || fails=$((fails + 1))
      same_ckpt "${n}_inplace" "${n}_over" || fails=$((fails + 1))
      same_ckpt "${n}_none" "${n}_over" || fails=$((fails + 1))
      # offload_optimizer.ratio = 0.4: 60% of each rank's optimizer range (its start) stays on the backend
      run "${n}_ratio" "$np" "${lay[@]}" "${off[@]}" --set zero_optimization.offload_optimizer.ratio=0.4 "${common[@]}" ||
        { fails=$((fails + 1)); continue; }
      same_metrics "${n}_none" "${n}_ratio" || fails=$((fails + 1))
      same_ckpt "${n}_none" "${n}_ratio" || fails=$((fails + 1))
    done
  done
done
# resuming a split (ratio) run mid-way reads its state back into both places: 3 steps + resume to 5 == 5 steps
ratio=(--set zero_optimization.stage=3 --set train_micro_batch_size_per_gpu=12 --set zero_optimization.offload_optimizer.device=cpu
       --set zero_optimization.offload_param.device=cpu --set zero_optimization.offload_optimizer.ratio=0.4)
run split_ab 2 "${ratio[@]}" --set max_steps=3 && run split_ab 2 "${ratio[@]}" && grep -q "resuming" split_ab.out ||
  { echo "FAIL: split resume"; fails=$((fails + 1)); }
same_ckpt np2_s3_ga1_ratio split_ab || fails=$((fails + 1))
[ "$fails" -eq 0 ] && echo "PASS: overlapped offload == in-place offload == no offload == ratio 0.4, bit for bit (12 layouts); split resume exact" || { echo "FAIL: $fails"; exit 1; }
