# tests/hardening_common.sh — sourced by tests/cli/*_hardening_*.sh: scratch dir, a tiny dataset and deck,
# and expect CODE "what" "pattern in stderr" cmd... (exit code and message asserted, docs/reliability.md).
set -uo pipefail
rm -rf "$WORK"; mkdir -p "$WORK"; cd "$WORK"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
MPIRUN=${MPIEXEC:-mpirun}
[ -n "$MPIRUN" ] || MPIRUN=mpirun
fail=0
expect() { # expect CODE "what" "ERE in stderr+stdout" cmd...
  local want=$1 what=$2 pat=$3; shift 3
  timeout 300 "$@" > out.txt 2> err.txt; local rc=$?
  if [ $rc -ne "$want" ]; then echo "FAIL: $what: exit $rc, expected $want"; tail -5 err.txt out.txt; fail=1; return 1; fi
  # (grep reads the files itself: `cat | grep -q` under pipefail fails whenever grep exits before cat is done)
  if ! grep -qE -- "$pat" err.txt out.txt; then echo "FAIL: $what: output lacks /$pat/:"; tail -5 err.txt; fail=1; return 1; fi
  echo "ok: $what -> exit $rc: $(grep -hE -- "$pat" err.txt out.txt | head -1 | head -c 200)"
}
. "$SRC/tests/unit_common.sh"
demo_h5 200 t.jsonl g.h5
cat > d.cfg <<'DECK'
model = { vocab_size = 320; hidden_size = 32; intermediate_size = 64; num_hidden_layers = 1; num_attention_heads = 4; };
data = { train = "g.h5"; valid = "g.h5"; seq_len = 32; };
train_batch_size = 4; train_micro_batch_size_per_gpu = 2; max_steps = 1;
checkpoint = { dir = "ck"; };
DECK
