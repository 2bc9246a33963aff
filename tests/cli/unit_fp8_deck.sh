#!/usr/bin/env bash
# fp8.* deck keys without a GPU: every refusal is exit 2 with one message that names the key and says why, before
# anything trains (no checkpoint, no metrics):
#   A  fp8.enabled without bf16.enabled (fp32) and with fp16.enabled: refused while the deck loads (estimate and
#      train alike), naming the deck's line of fp8.enabled;
#   B  an unknown fp8.recipe: refused with the allowed values and the nearest one;
#   C  fp8 with bf16 on the CPU backend (a CPU-only build, or QWENFT_BACKEND=cpu in a CUDA build): train refuses
#      at backend selection, naming fp8.enabled, the recipe and the CPU backend;
#   D  the keys are in `deck --keys` and docs/deck.md's key reference, and fp8 = { enabled = false; } trains.
set -euo pipefail
. "$SRC/tests/unit_common.sh"
rm -rf "$WORK"; mkdir -p "$WORK"; cd "$WORK"
fail() { echo "FAIL: $*"; exit 1; }
demo_h5 200 train.jsonl train.h5
base() {
  cat <<'DECK'
model = { arch = "qwen2"; vocab_size = 320; hidden_size = 64; intermediate_size = 128; num_hidden_layers = 1;
          num_attention_heads = 4; num_key_value_heads = 2; tie_word_embeddings = true; };
data = { train = "train.h5"; seq_len = 32; };
train_batch_size = 2; train_micro_batch_size_per_gpu = 2; max_steps = 2;
eval = { every_steps = 0; };
DECK
}
# expect CMD NAME 'PATTERN': CMD exits 2 and its first line matches PATTERN (a grep -E expression)
expect2() {
  local name=$1 pat=$2; shift 2
  set +e; "$@" > "$name.out" 2>&1; local rc=$?; set -e
  [ "$rc" = 2 ] || { cat "$name.out"; fail "$name: exit $rc, expected 2"; }
  head -1 "$name.out" | grep -Eq "$pat" || { cat "$name.out"; fail "$name: message does not match /$pat/"; }
  [ ! -e "$name/ck" ] && [ ! -e "$name/l/metrics.jsonl" ] || fail "$name: wrote outputs before refusing"
  echo "ok $name: $(head -1 "$name.out")"
}
# A
{ base; echo 'fp8 = { enabled = true; };'; } > fp32.cfg
expect2 A_fp32_estimate "^qwen-ft: fp32.cfg:6: key 'fp8.enabled': fp8 training needs bf16.enabled = true .*fp32 runs have no fp8 path" \
  "$QWENFT" estimate fp32.cfg
expect2 A_fp32_train "^qwen-ft: fp32.cfg:6: key 'fp8.enabled': fp8 training needs bf16.enabled = true" \
  "$QWENFT" train fp32.cfg --set checkpoint.dir=A_fp32_train/ck --set log.dir=A_fp32_train/l
{ base; echo 'fp16 = { enabled = true; };'; echo 'fp8 = { enabled = true; recipe = "rowwise"; };'; } > fp16.cfg
expect2 A_fp16 "^qwen-ft: fp16.cfg:7: key 'fp8.enabled': fp8 training needs bf16.enabled = true .*fp16 with its loss scaling does not combine" \
  "$QWENFT" train fp16.cfg --set checkpoint.dir=A_fp16/ck --set log.dir=A_fp16/l
# B
{ base; echo 'bf16 = { enabled = true; };'; echo 'fp8 = { enabled = true; recipe = "row-wise"; };'; } > badrecipe.cfg
expect2 B_recipe "^qwen-ft: badrecipe.cfg:7: key 'fp8.recipe': expected one of \"tensorwise\", \"rowwise\", got \"row-wise\" \(did you mean \"rowwise\"\?\)" \
  "$QWENFT" estimate badrecipe.cfg
# C
for r in tensorwise rowwise; do
  { base; echo 'bf16 = { enabled = true; };'; echo "fp8 = { enabled = true; recipe = \"$r\"; };"; } > cpu_$r.cfg
  QWENFT_BACKEND=cpu expect2 C_cpu_$r "^qwen-ft: key 'fp8.enabled' \(fp8.recipe \"$r\"\): this rank runs on the CPU backend .*compute capability 8.9" \
    "$QWENFT" train cpu_$r.cfg --set checkpoint.dir=C_cpu_$r/ck --set log.dir=C_cpu_$r/l
done
# D
"$QWENFT" deck --keys > keys.md
for k in fp8.enabled fp8.recipe; do
  grep -q "^| \`$k\` |" keys.md || fail "deck --keys lacks $k"
  grep -qF "$(grep "^| \`$k\` |" keys.md)" "$SRC/docs/deck.md" || fail "docs/deck.md's key reference differs for $k (regenerate it)"
done
{ base; echo 'fp8 = { enabled = false; recipe = "rowwise"; };'; } > off.cfg
QWENFT_BACKEND=cpu "$QWENFT" train off.cfg --set checkpoint.dir=D/ck --set log.dir=D/l > D.out 2>&1 || { cat D.out; fail "fp8.enabled = false did not train"; }
[ "$(grep -c '"loss"' D/l/metrics.jsonl)" = 2 ] || fail "fp8.enabled = false: expected 2 logged steps"
echo "PASS: fp8 refused with exit 2 and the key's name on fp32/fp16 decks, a bad recipe and the CPU backend; keys documented; fp8 off trains"
