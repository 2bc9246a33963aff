#!/usr/bin/env bash
# The shipped cluster decks (inputs/4090.cfg, 4090x1.cfg, a100.cfg, h200.cfg) load and satisfy the batch rule at
# the world size of their Slurm script (and the consumer decks at 1, 2 and 8 cards), and plan memory that fits
# their GPUs (qwen-ft estimate; the architecture from a preset instead of the model file the decks name); on one
# and two 24 GB cards the 14B plan puts the gradient shard in host memory (estimate's 'h'), on eight it stays on the
# GPU; the seed settings are what the issue asked for.
set -euo pipefail
rm -rf "$WORK"; mkdir -p "$WORK"; cd "$WORK"
fails=0
check() { # DECK RANKS GPU_GB [PRESET [WANT_HOST_GRADS]]
  local out
  if ! out=$("$QWENFT" estimate "$SRC/inputs/$1" --ranks "$2" --device gpu --set 'model.from=""' --set model.preset="${4:-qwen-14b}" 2>&1); then
    echo "FAIL: $1 at $2 ranks: $out"; fails=$((fails + 1)); return
  fi
  local dev; dev=$(echo "$out" | awk '/\*$/ {print $(NF-3)}' | tr -d G)
  if python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) else 1)" "$dev" "$3"; then
    echo "$1 at $2 ranks: ${dev} GiB per GPU (< $3)"
  else
    echo "FAIL: $1 at $2 ranks plans ${dev} GiB per GPU, more than $3"; fails=$((fails + 1))
  fi
  if [ -n "${5:-}" ]; then
    local h; h=$(echo "$out" | awk '/\*$/ {print ($4 ~ /h$/) ? 1 : 0}')
    [ "$h" = "$5" ] || { echo "FAIL: $1 at $2 ranks: gradients on the host = $h, expected $5"; echo "$out"; fails=$((fails + 1)); }
  fi
}
check 4090.cfg 8 22.5 qwen-14b 0
check 4090.cfg 2 22.5 qwen-14b 1
check 4090.cfg 1 22.5 qwen-14b 1
check 4090x1.cfg 1 22.5 qwen2.5-7b 1
check 4090x1.cfg 2 22.5 qwen2.5-7b 0
check 4090x1.cfg 8 22.5 qwen2.5-7b 0
check a100.cfg 4 76
check h200.cfg 8 135
check h200.cfg 32 135
grep -q '^gpu_memory_limit_gb = 24;' "$SRC/inputs/4090.cfg" || { echo "FAIL: 4090.cfg: no rehearsal knob"; fails=$((fails + 1)); }
for k in 'loss_scale_window = 100' 'seq_len = 512' 'train_micro_batch_size_per_gpu = 16' 'gradient_accumulation_steps = 16' \
         'device = "cpu"; pin_memory = true' 'stage = 3'; do
  grep -q "$k" "$SRC/inputs/4090.cfg" || { echo "FAIL: 4090.cfg lacks '$k'"; fails=$((fails + 1)); }
done
for k in 'lr = 2e-5' 'warmup_num_steps = 500' 'total_num_steps = 10000' 'gradient_clipping = 1.0' \
         'activation_checkpointing = true' 'bf16 = { enabled = true; }' 'stage = 3'; do
  grep -q "$k" "$SRC/inputs/a100.cfg" || { echo "FAIL: a100.cfg lacks '$k'"; fails=$((fails + 1)); }
done
[ "$fails" -eq 0 ] && echo "PASS" || { echo "FAIL: $fails"; exit 1; }
