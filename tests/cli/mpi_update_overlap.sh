#!/usr/bin/env bash
# The backend's AdamW overlapped with the next forward (QWENFT_UPDATE_OVERLAP=1; src/zero/zero.c side_update: unit by
# unit on the op table's side stream, each unit's first use in the next forward waiting for its mark) gives the
# trajectory of the update completed inside the step (the default), bit for bit: per-step losses, gradient norms and evaluation
# losses equal as printed and the final checkpoints' master weights and Adam moments identical (h5diff), with a
# checkpoint and an evaluation every 2 steps landing while an update is in flight, accumulation 1 and 2, stage 0 on
# 1 and 2 ranks and stages 1-2 on one rank (overlapped) and on two (completed inside the step: the run header says
# why). On CPU ranks the side stream's ops run at once, so this checks the engine's per-unit split, the marks and the
# deferred zeroing of the gradients; tests/cli/gpu_update_overlap.sh runs it on the CUDA tables, where the update
# really overlaps. UPDATE_OVERLAP_NP (default "1 2") and UPDATE_OVERLAP_SETS (extra --set words) for that wrapper.
. "$SRC/tests/mpi_common.sh"
command -v h5diff > /dev/null || { echo "SKIP: h5diff (hdf5-tools) not installed"; exit 77; }
read -r -a extra <<< "${UPDATE_OVERLAP_SETS:-}"
common=(--set checkpoint.every_steps=2 --set eval.every_steps=2 "${extra[@]}")
fails=0 runs=0
for np in ${UPDATE_OVERLAP_NP:-1 2}; do
  for stage in 0 1 2; do
    for ga in 1 2; do
      micro=$((24 / (np * ga)))
      lay=(--set "zero_optimization.stage=$stage" --set "train_micro_batch_size_per_gpu=$micro" --set "gradient_accumulation_steps=$ga")
      n="np${np}_s${stage}_ga${ga}"
      QWENFT_UPDATE_OVERLAP=1 run "${n}_over" "$np" "${lay[@]}" "${common[@]}" || { fails=$((fails + 1)); continue; }
      run "${n}_inplace" "$np" "${lay[@]}" "${common[@]}" || { fails=$((fails + 1)); continue; }
      runs=$((runs + 1))
      want="overlapped with the next forward unit by unit"
      if [ "$stage" -gt 0 ] && [ "$np" -gt 1 ]; then want="completed inside each step (stages 1-2 on several ranks"; fi
      grep -q "^optimizer: AdamW on the .* backend, $want" "${n}_over.out" ||
        { echo "FAIL: ${n}_over: header does not say '$want'"; grep '^optimizer:' "${n}_over.out"; fails=$((fails + 1)); }
      grep -q "^optimizer: AdamW on the .* backend, completed inside each step (" "${n}_inplace.out" ||
        { echo "FAIL: ${n}_inplace: not completed inside the step"; grep '^optimizer:' "${n}_inplace.out"; fails=$((fails + 1)); }
      same_metrics "${n}_inplace" "${n}_over" || fails=$((fails + 1))
      same_ckpt "${n}_inplace" "${n}_over" || fails=$((fails + 1))
    done
  done
done
# resuming an overlapped run mid-way: 3 steps + resume to 5 == 5 steps
one=(--set zero_optimization.stage=0 --set train_micro_batch_size_per_gpu=24 "${extra[@]}")
if QWENFT_UPDATE_OVERLAP=1 run resume_ab 1 "${one[@]}" --set max_steps=3 && QWENFT_UPDATE_OVERLAP=1 run resume_ab 1 "${one[@]}" &&
   run resume_ref 1 "${one[@]}" &&
   grep -q "resuming" resume_ab.out; then
  same_ckpt resume_ref resume_ab || fails=$((fails + 1))
else
  echo "FAIL: overlapped resume"; fails=$((fails + 1))
fi
if [ "$fails" -ne 0 ]; then echo "FAIL: $fails"; exit 1; fi
echo "PASS: the overlapped update == the update completed in the step, bit for bit ($runs layouts); resume exact"
