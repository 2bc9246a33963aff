# tests/prepare_common.sh — sourced by tests/cli/unit_prepare*.sh: strict shell, the scratch directory, and the
# helpers: fail MSG (prints out.txt/err.txt of the last run, exit 1), run ARGS... (qwen-ft ARGS with stdout in
# out.txt, stderr in err.txt, the exit code in $rc), dump_packed H5 (/tokens, /loss_mask, /doc_offsets of H5 raw
# in H5.<name>.bin, for tests/reference/packed_golden.py). Env: QWENFT (binary), WORK (scratch dir, created), SRC.
set -euo pipefail
: "${QWENFT:?set QWENFT to the qwen-ft binary}" "${WORK:?set WORK to a scratch directory}" "${SRC:?set SRC}"
export OMPI_ALLOW_RUN_AS_ROOT="${OMPI_ALLOW_RUN_AS_ROOT:-1}" OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}"
rm -rf "$WORK"; mkdir -p "$WORK"; cd "$WORK"
fail() { echo "FAIL: $*"; for f in out.txt err.txt; do [ -f "$f" ] && { echo "--- $f"; cat "$f"; }; done; exit 1; }
run() { rc=0; "$QWENFT" "$@" > out.txt 2> err.txt || rc=$?; }
dump_packed() {
    local d
    for d in tokens loss_mask doc_offsets; do
        h5dump -d "/$d" -b LE -o "$1.$d.bin" "$1" > /dev/null || fail "h5dump of /$d in $1"
    done
}
