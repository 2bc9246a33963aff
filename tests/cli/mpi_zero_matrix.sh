#!/usr/bin/env bash
# ZeRO equivalence on CPU ranks: 1, 2, 3, 4 ranks x stages 0-3 x offload none/cpu x gradient accumulation 1/2
# give the per-step losses of the 1-rank run, within 1e-6 relative (docs/zero.md: only the summation order of
# gradients across ranks differs). Offload cpu = optimizer offload (stages 1-3) + parameter offload (stage 3);
# DeepSpeed allows no offload at stage 0, so stage 0 runs without.
. "$SRC/tests/mpi_common.sh"
run ref 1 --set zero_optimization.stage=0 --set train_micro_batch_size_per_gpu=24
fails=0
for np in 1 2 3 4; do
  for stage in 0 1 2 3; do
    for off in none cpu; do
      [ "$stage" = 0 ] && [ "$off" = cpu ] && continue
      for ga in 1 2; do
        micro=$((24 / (np * ga)))
        name="np${np}_s${stage}_${off}_ga${ga}"
        extra=()
        [ "$off" = cpu ] && extra+=(--set zero_optimization.offload_optimizer.device=cpu)
        [ "$off" = cpu ] && [ "$stage" = 3 ] && extra+=(--set zero_optimization.offload_param.device=cpu)
        run "$name" "$np" --set zero_optimization.stage=$stage --set train_micro_batch_size_per_gpu=$micro \
            --set gradient_accumulation_steps=$ga "${extra[@]}" || { fails=$((fails + 1)); continue; }
        compare ref "$name" 1e-6 || fails=$((fails + 1))
      done
    done
  done
done
echo "reference losses: $(losses ref)"
[ "$fails" -eq 0 ] && echo "PASS: 56 layouts agree with 1 rank" || { echo "FAIL: $fails layouts"; exit 1; }
