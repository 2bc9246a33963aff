# shellcheck shell=bash
# tests/unit_common.sh — sourced by tests/cli/unit_*.sh and gpu_*.sh that run the binary in one process, and by
# tests/hardening_common.sh; defines, and runs nothing:
#   demo_h5 LINES JSONL H5 [SPLIT]: the first LINES lines of inputs/demo/SPLIT.jsonl (train) copied to JSONL and
#     prepared into H5 (vocab 320, eos 256); a failed prepare is "FAIL: prepare", exit 1.
#   fixture_prologue: QWENFT/WORK/SRC required, mpirun allowed as root, a fresh $WORK as the working
#     directory, skip (77) without python3, FIX = tests/reference/fixtures.
#   wide_fixture: qwen2_gqa_untied widened to the fixture tokenizer's ids (widen_fixture.py), with that
#     tokenizer.json, in wide/.
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
