# tests/mpi_common.sh — sourced by tests/cli/mpi_*.sh: scratch dir, a tiny dataset and deck, mpirun on CPU ranks.
set -euo pipefail
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OMP_NUM_THREADS=1
MPIRUN=${MPIEXEC:-mpirun}
[ -n "$MPIRUN" ] || MPIRUN=mpirun
rm -rf "$WORK"; mkdir -p "$WORK"; cd "$WORK"
head -n 400 "$SRC/inputs/demo/train.jsonl" > train.jsonl
head -n 60 "$SRC/inputs/demo/valid.jsonl" > valid.jsonl
"$QWENFT" prepare --in train.jsonl --out train.h5 --vocab-size 320 --eos-id 256 > /dev/null
"$QWENFT" prepare --in valid.jsonl --out valid.h5 --vocab-size 320 --eos-id 256 > /dev/null
# a Qwen3-shaped model with tied embeddings: 4 units of similar size plus the embedding
cat > deck.cfg <<'DECK'
model = { arch = "qwen3"; vocab_size = 320; hidden_size = 32; intermediate_size = 64; num_hidden_layers = 3;
          num_attention_heads = 4; num_key_value_heads = 2; head_dim = 16; init_seed = 7; tie_word_embeddings = true; };
data = { train = "train.h5"; valid = "valid.h5"; seq_len = 32; shuffle = true; seed = 3; };
train_batch_size = 24;
max_steps = 5; gradient_clipping = 0.5;
optimizer = { type = "AdamW"; params = { lr = 5e-3; weight_decay = 0.1; }; };
scheduler = { type = "WarmupDecayLR"; params = { warmup_max_lr = 5e-3; warmup_num_steps = 2; total_num_steps = 8; }; };
eval = { every_steps = 0; };
log = { steps_per_print = 1000; };
zero_optimization = { stage3_param_persistence_threshold = 100; stage3_prefetch_bucket_size = 20000;
                      reduce_bucket_size = 5000; overlap_comm = true; };
DECK
# run NAME NP [--set ...]: trains into NAME/ (checkpoints NAME/ck, metrics NAME/l)
run() {
  local name=$1 np=$2; shift 2
  if ! timeout 120 "$MPIRUN" -np "$np" "$QWENFT" train deck.cfg --set checkpoint.dir="$name/ck" --set log.dir="$name/l" "$@" > "$name.out" 2>&1; then
    echo "FAIL: $name (np=$np $*) exited non-zero:"; tail -20 "$name.out"; return 1
  fi
}
# losses NAME: the per-step losses, one line
losses() { python3 -c '
import json, sys
print(" ".join(repr(json.loads(l)["loss"]) for l in open(sys.argv[1]) if "\"loss\"" in l))' "$1/l/metrics.jsonl"; }
# compare A B RTOL: per-step losses of B against A
compare() { python3 - "$1/l/metrics.jsonl" "$2/l/metrics.jsonl" "$3" "$2" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
b = [json.loads(l) for l in open(sys.argv[2]) if '"loss"' in l]
tol = float(sys.argv[3])
if len(a) != len(b) or not a:
    print(f"FAIL {sys.argv[4]}: {len(b)} steps vs {len(a)}"); sys.exit(1)
worst = max(abs(x["loss"] - y["loss"]) / abs(x["loss"]) for x, y in zip(a, b))
exact = all(x["loss"] == y["loss"] for x, y in zip(a, b))
print(f"{sys.argv[4]:<28} max rel diff {worst:.2e} {'(bit-exact)' if exact else ''}")
sys.exit(0 if worst <= tol else 1)
PY
}
# same_metrics A B: the per-step losses, gradient norms, evaluation losses and skip flags of two runs are equal as
# printed (and there are at least 5 records)
same_metrics() { python3 - "$1/l/metrics.jsonl" "$2/l/metrics.jsonl" "$2" <<'PY'
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]
b = [json.loads(l) for l in open(sys.argv[2])]
keys = ("step", "loss", "grad_norm", "valid_loss", "skipped")
pa = [tuple(r.get(k) for k in keys) for r in a]
pb = [tuple(r.get(k) for k in keys) for r in b]
ok = pa == pb and len(pa) >= 5
print(f"{sys.argv[3]:<34} {'identical' if ok else 'DIFFERENT'} ({len(pb)} records)")
if not ok:
    for x, y in zip(pa, pb):
        print("  ", x, y)
sys.exit(0 if ok else 1)
PY
}
# same_ckpt A B: the last checkpoints of two runs hold identical master weights and Adam moments
same_ckpt() {
  local a b
  a=$(ls "$1"/ck/step-*.h5 | tail -1); b=$(ls "$2"/ck/step-*.h5 | tail -1)
  for g in master adam_m adam_v; do
    h5diff -q "$a" "$b" "/$g" "/$g" || { echo "FAIL: $2: /$g differs from $1"; return 1; }
  done
}
