#!/usr/bin/env bash
# A checkpoint written by 2 ranks at ZeRO-3 resumes on 3 ranks at ZeRO-1 and on 4 ranks at ZeRO-1 (with optimizer
# offload) onto the trajectory of an uninterrupted 1-rank run (per-step losses within 1e-6 relative).
. "$SRC/tests/mpi_common.sh"
sed -i 's/max_steps = 5;/max_steps = 6;/' deck.cfg
run full 1 --set zero_optimization.stage=0
fails=0
for target in "3 1 none" "4 1 cpu"; do
  read -r np stage off <<<"$target"
  name="r2s3_to_${np}s${stage}${off}"
  run "$name" 2 --set zero_optimization.stage=3 --set max_steps=3 || { fails=$((fails + 1)); continue; }
  extra=()
  [ "$off" = cpu ] && extra+=(--set zero_optimization.offload_optimizer.device=cpu)
  run "$name" "$np" --set zero_optimization.stage="$stage" "${extra[@]}" || { fails=$((fails + 1)); continue; }
  grep -q "resuming at step 3" "$name.out" || { echo "FAIL: $name did not resume at step 3"; fails=$((fails + 1)); }
  compare full "$name" 1e-6 || fails=$((fails + 1))
done
echo "full-run losses: $(losses full)"
[ "$fails" -eq 0 ] && echo "PASS" || { echo "FAIL: $fails"; exit 1; }
