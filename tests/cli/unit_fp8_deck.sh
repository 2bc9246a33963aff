#!/usr/bin/env bash
# fp8.* deck keys without a GPU: every refusal is exit 2 with one message that names the key and says why, before
# anything trains (no checkpoint, no metrics):
#   A  fp8.enabled without bf16.enabled (fp32) and with fp16.enabled: refused while the deck loads (estimate and
#      train alike), naming the deck's line of fp8.enabled;
#   B  an unknown fp8.recipe: refused with the allowed values and the nearest one; fp8.amax_history_len outside
#      0..1024 (or not an integer): refused naming the key and the range;
#   C  fp8 with bf16 on the CPU backend (a CPU-only build, or QWENFT_BACKEND=cpu in a CUDA build): train refuses
#      at backend selection, naming fp8.enabled, the recipe and the CPU backend;
#   D  the keys are in `deck --keys` and docs/deck.md's key reference; fp8 = { enabled = false; recipe = ...; }
#      trains, and the run header lists fp8.recipe as having no effect (fp8.enabled is false);
#   E  `estimate --device gpu` counts the fp8 buffers in the device total, as matmul_fp8.cu allocates them, and with
#      fp8.save_inputs the saved q(x)^T of the 4 fp8 layer inputs of every layer without recomputation (none with
#      activation_checkpointing on all layers).
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
  grep -v '^\[\|^ \|^    ' "$name.out" | head -1 | grep -Eq "$pat" || { cat "$name.out"; fail "$name: message does not match /$pat/"; }
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
for h in 1025 -1 2.5; do
  { base; echo 'bf16 = { enabled = true; };'; echo "fp8 = { enabled = true; amax_history_len = $h; };"; } > hist.cfg
  expect2 "B_history_$h" "^qwen-ft: hist.cfg:7: key 'fp8.amax_history_len': expected an integer in 0..1024" \
    "$QWENFT" estimate hist.cfg
done
# C
for r in tensorwise rowwise; do
  { base; echo 'bf16 = { enabled = true; };'; echo "fp8 = { enabled = true; recipe = \"$r\"; };"; } > cpu_$r.cfg
  QWENFT_BACKEND=cpu expect2 C_cpu_$r "^qwen-ft: key 'fp8.enabled' \(fp8.recipe \"$r\"\): this rank runs on the CPU backend .*compute capability 8.9" \
    "$QWENFT" train cpu_$r.cfg --set checkpoint.dir=C_cpu_$r/ck --set log.dir=C_cpu_$r/l
done
# D
"$QWENFT" deck --keys > keys.md
for k in fp8.enabled fp8.recipe fp8.amax_history_len fp8.save_inputs; do
  grep -q "^| \`$k\` |" keys.md || fail "deck --keys lacks $k"
  grep -qF "$(grep "^| \`$k\` |" keys.md)" "$SRC/docs/deck.md" || fail "docs/deck.md's key reference differs for $k (regenerate it)"
done
{ base; echo 'fp8 = { enabled = false; recipe = "rowwise"; };'; } > off.cfg
QWENFT_BACKEND=cpu "$QWENFT" train off.cfg --set checkpoint.dir=D/ck --set log.dir=D/l > D.out 2>&1 || { cat D.out; fail "fp8.enabled = false did not train"; }
[ "$(grep -c '"loss"' D/l/metrics.jsonl)" = 2 ] || fail "fp8.enabled = false: expected 2 logged steps"
grep -q "accepted, no effect here: .*fp8.recipe (fp8.enabled is false)" D.out || { grep -i "no effect" D.out; fail "the header does not list fp8.recipe as switched off"; }
# E: the memory plan counts the fp8 buffers (kernels/cuda/matmul_fp8.cu's allocation, computed here independently)
printf 'model = { preset = "qwen2.5-7b"; };\nbf16 = { enabled = true; };\ndata = { seq_len = 4096; };\ntrain_micro_batch_size_per_gpu = 1;\nactivation_checkpointing = true;\n' > e.cfg
"$QWENFT" estimate e.cfg --device gpu > e0.out 2>&1 || { cat e0.out; fail "estimate e.cfg"; }
"$QWENFT" estimate e.cfg --device gpu --set fp8.enabled=true > e1.out 2>&1 || { cat e1.out; fail "estimate e.cfg fp8"; }
"$QWENFT" estimate e.cfg --device gpu --set fp8.enabled=true --set fp8.save_inputs=true > e2.out 2>&1 || { cat e2.out; fail "estimate e.cfg fp8 save (recomputation)"; }
"$QWENFT" estimate e.cfg --device gpu --set fp8.enabled=true --set fp8.save_inputs=true --set activation_checkpointing=false > e3.out 2>&1 || { cat e3.out; fail "estimate e.cfg fp8 save"; }
"$QWENFT" estimate e.cfg --device gpu --set fp8.enabled=true --set fp8.recipe=rowwise > e4.out 2>&1 || { cat e4.out; fail "estimate e.cfg fp8 rowwise"; }
python3 - e0.out e1.out e2.out e3.out e4.out <<'PY' || fail "E: estimate's fp8 buffers"
import re, sys
N, C, HD, KD, F = 4096, 3584, 3584, 512, 18944   # Qwen2.5-7B, one micro-batch of 4096 tokens
up = lambda x: -(-x // (2 << 20)) * (2 << 20)
v = -(-max(N, C, HD, KD, F) // 1024) * 1024
want = up(N * max(C, HD, F)) + up(C * max(HD, KD, F)) + 2 * up(N * max(C, HD, KD, F)) + 7 * 4 * v
e0, e1 = open(sys.argv[1]).read(), open(sys.argv[2]).read()
m = re.search(r"fp8.enabled \(tensorwise\): ([0-9.]+) GiB per rank", e1)
assert m and abs(float(m.group(1)) - want / 2**30) < 0.006, (m and m.group(1), want / 2**30)
assert "fp8" not in e0
tot = lambda t: float(re.search(r"^0 +none +(?:\S+ +){4}([0-9.]+)G", t, re.M).group(1))
assert abs(tot(e1) - tot(e0) - want / 2**30) < 0.011, (tot(e0), tot(e1), want / 2**30)
print(f"ok E: estimate plans {want / 2**30:.3f} GiB of fp8 buffers at 7B / 4096 tokens (stage 0 device {tot(e0)} -> {tot(e1)} GiB)")
e2, e3 = open(sys.argv[3]).read(), open(sys.argv[4]).read()
gib = lambda t: float(re.search(r"fp8.enabled \(tensorwise\): ([0-9.]+) GiB per rank", t).group(1))
assert abs(gib(e2) - want / 2**30) < 0.006, (gib(e2), want / 2**30) # every layer recomputes: nothing saved
save = 28 * (up(N * C) + up(N * HD) + up(N * C) + up(N * F)) # q's ln1, o's att, gate/up's ln2, down's swi
assert abs(gib(e3) - (want + save) / 2**30) < 0.006, (gib(e3), (want + save) / 2**30)
print(f"ok E: fp8.save_inputs adds {save / 2**30:.3f} GiB without recomputation, nothing with it")
# rowwise: the accumulating GEMMs' bf16 output before the per-row scales (dW of gate/up/down: C x F is the largest)
tmp = up(2 * max(C * max(HD, KD, F), N * max(C, HD, F)))
e4 = open(sys.argv[5]).read()
r = float(re.search(r"fp8.enabled \(rowwise\): ([0-9.]+) GiB per rank", e4).group(1))
assert abs(r - (want + tmp) / 2**30) < 0.006, (r, (want + tmp) / 2**30)
print(f"ok E: rowwise adds {tmp / 2**30:.3f} GiB for the scales applied after the GEMM")
PY
echo "PASS: fp8 refused with exit 2 and the key's name on fp32/fp16 decks, a bad recipe and the CPU backend; keys documented; fp8 off trains"
