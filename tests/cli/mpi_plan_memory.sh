#!/usr/bin/env bash
# The layout planner's memory prediction against what a CPU run really holds: for a grid of small models (width,
# depth, tied or not) on 1 and 2 ranks, a deck with "auto" stage, offload, micro batch and recomputation runs;
# the plan's predicted model state and activations per rank (the run header's "layout plan per rank" line)
# must be within 5% of what the run measured (the engine's own count of its model state peak plus the model's
# activation buffers: the run's "memory: rank 0" line), and never below it: activations within 5%, the model
# state within 10% (with overlap_comm the estimate counts the most unit-gradient buffers that can be in flight
# at once, an upper bound that CPU ranks' MPI, completing at once, seldom reaches).
. "$SRC/tests/mpi_common.sh"
fails=0
auto=(--set zero_optimization.stage='"auto"' --set zero_optimization.offload_optimizer.device='"auto"'
      --set zero_optimization.offload_param.device='"auto"' --set activation_checkpointing='"auto"'
      --set train_micro_batch_size_per_gpu='"auto"' --set max_steps=2)
for shape in "128 256 8 true" "192 384 12 false" "256 512 6 true"; do
  read -r C F L tied <<<"$shape"
  dims=(--set model.hidden_size="$C" --set model.intermediate_size="$F" --set model.num_hidden_layers="$L"
        --set model.num_attention_heads=8 --set model.num_key_value_heads=4 --set model.head_dim=16
        --set model.tie_word_embeddings="$tied")
  for np in 1 2 2s3; do
    name="plan_c${C}_l${L}_np${np}"
    # 2s3: stage 3 with the rest "auto", overlap_comm off (the in-flight buffers exact: see above)
    extra=(); [ "$np" = 2s3 ] && extra=(--set zero_optimization.stage=3 --set zero_optimization.overlap_comm=false)
    run "$name" "${np%s3}" "${dims[@]}" "${auto[@]}" "${extra[@]}" || { fails=$((fails + 1)); continue; }
    python3 - "$name.out" "$name" <<'PY' || fails=$((fails + 1))
import re, sys
t = open(sys.argv[1]).read()
plan = re.search(r'layout plan \("auto"\): (.*?); predicted', t)
pred = re.search(r'layout plan per rank: model state ([0-9.]+) MiB .*activations ([0-9.]+) MiB', t)
got = re.search(r'memory: rank 0 model state peak ([0-9.]+) MiB .*activations ([0-9.]+) MiB', t)
if not (plan and pred and got):
    print(f"FAIL: {sys.argv[2]}: no plan or memory line"); sys.exit(1)
ps, pa = map(float, pred.groups()); gs, ga = map(float, got.groups())
tot_p, tot_g = ps + pa, gs + ga
ok = abs(tot_p - tot_g) <= 0.05 * tot_g and tot_p >= 0.99 * tot_g and abs(ps - gs) <= 0.10 * gs and abs(pa - ga) <= 0.05 * ga
print(f"{sys.argv[2]:18s} {plan.group(1)}: peak {tot_p:.1f} MiB predicted / {tot_g:.1f} measured "
      f"({100 * (tot_p / tot_g - 1):+.1f}%; state {ps:.1f} / {gs:.1f}, activations {pa:.1f} / {ga:.1f})  {'ok' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
  done
done
[ "$fails" -eq 0 ] && echo "PASS" || { echo "FAIL: $fails"; exit 1; }
