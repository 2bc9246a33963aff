#!/usr/bin/env bash
# Every JSON qwen-ft writes goes through jansson (src/util/json_out.c) and parses: metrics.jsonl lines all carry "type"
# and a UTC "time", train lines SPEC's keys, eval lines step/valid_loss/valid_ppl/valid_tokens, memory only in
# *_gib keys; `qwen-ft eval` on a validation set without a trained target prints null (not nan) and flags it in
# "nonfinite"; estimate --json carries the table's numbers; report --json parses.
set -uo pipefail
. "$SRC/tests/unit_common.sh"
rm -rf "$WORK"; mkdir -p "$WORK"; cd "$WORK"
demo_h5 200 t.jsonl t.h5
printf '{"input_ids": [1, 2, 3, 4], "loss_mask": [0, 0, 0, 0]}\n' > none.jsonl
"$QWENFT" prepare --in none.jsonl --out none.h5 --vocab-size 320 --eos-id 256 > /dev/null || { echo "FAIL: prepare"; exit 1; }
cat > g.cfg <<'DECK'
model = { vocab_size = 320; hidden_size = 32; intermediate_size = 64; num_hidden_layers = 1; num_attention_heads = 4; };
data = { train = "t.h5"; valid = "t.h5"; seq_len = 32; };
train_batch_size = 4; train_micro_batch_size_per_gpu = 4; max_steps = 3;
checkpoint = { dir = "ck"; };
eval = { every_steps = 1; max_batches = 1; };
log = { dir = "lg"; };
DECK
"$QWENFT" train g.cfg > train.out 2>&1 || { echo "FAIL: train"; cat train.out; exit 1; }
grep -q "| MFU n/a |" train.out && grep -q "MFU n/a (no peak" train.out || { echo "FAIL: MFU is not n/a on CPU ranks"; exit 1; }
"$QWENFT" train g.cfg --set peak_tflops=0.001 --set max_steps=4 > train2.out 2>&1 || { echo "FAIL: train 2"; exit 1; }
grep -q "MFU against 0 TFLOP/s" train2.out && grep '"step": 4' lg/metrics.jsonl | grep -q '"mfu": [0-9]' ||
  { echo "FAIL: peak_tflops does not give an MFU: $(grep '"step": 4' lg/metrics.jsonl)"; exit 1; }
"$QWENFT" eval g.cfg --set data.valid=none.h5 > none.json 2> /dev/null || { echo "FAIL: eval on none.h5"; exit 1; }
"$QWENFT" eval g.cfg > eval.json 2> /dev/null || { echo "FAIL: eval"; exit 1; }
"$QWENFT" estimate g.cfg --ranks 4 --set train_batch_size=16 --json > est.json || { echo "FAIL: estimate --json"; exit 1; }
"$QWENFT" estimate g.cfg --ranks 4 --set train_batch_size=16 > est.txt || { echo "FAIL: estimate"; exit 1; }
"$QWENFT" report --json > report.json || { echo "FAIL: report --json"; exit 1; }
# a shipped GPU deck before the weights exist: a message that says what to do, then --preset
rc=0; "$QWENFT" estimate "$SRC/inputs/a100.cfg" --ranks 4 --set 'model.preset=""' > /dev/null 2> nofile.err || rc=$?
[ "$rc" -eq 2 ] && grep -q "a100.cfg:8: key 'model.from': .*qwen14b.h5 does not exist (model.preset beside it, or estimate --preset" nofile.err ||
  { echo "FAIL: estimate without the weights or a preset: exit $rc: $(cat nofile.err)"; exit 1; }
"$QWENFT" estimate "$SRC/inputs/a100.cfg" --ranks 4 --device gpu --preset qwen2.5-14b --json > preset.json ||
  { echo "FAIL: estimate --preset"; exit 1; }
python3 - <<'PY'
import json, re, sys
bad = 0
def fail(msg):
    global bad; bad += 1; print("FAIL:", msg)
lines = [json.loads(l) for l in open("lg/metrics.jsonl")][:6]  # every line must parse; the first run's six
train = [o for o in lines if o.get("type") == "train"]
ev = [o for o in lines if o.get("type") == "eval"]
if len(train) != 3 or len(ev) != 3 or len(lines) != 6: fail(f"{len(train)} train + {len(ev)} eval of {len(lines)} lines")
for o in lines:
    if not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", o.get("time", "")): fail(f"time: {o.get('time')}")
    if [k for k in o if k.endswith("_gb")]: fail(f"a key in GB, not GiB: {o}")
for o in train:
    for k in ("step", "loss", "lr", "grad_norm", "tokens", "tokens_per_s", "mfu", "skipped",
              "peak_host_mem_gib", "peak_gpu_mem_gib"):
        if k not in o: fail(f"train line lacks {k}: {o}")
    if not (isinstance(o["loss"], float) and o["peak_host_mem_gib"] > 0 and isinstance(o["skipped"], bool)):
        fail(f"train line values: {o}")
    if o["mfu"] is not None or "nonfinite" in o: fail(f"CPU ranks have no peak: mfu must be null, unflagged: {o}")
for o in ev:
    if set(o) != {"type", "time", "step", "valid_loss", "valid_ppl", "valid_tokens"}: fail(f"eval line keys: {o}")
if [o["step"] for o in train] != [1, 2, 3] or [o["step"] for o in ev] != [1, 2, 3]: fail("steps")
none = json.load(open("none.json"))
if none != {"valid_loss": None, "valid_ppl": None, "tokens": 0, "nonfinite": ["valid_loss", "valid_ppl"]}:
    fail(f"eval without targets: {none}")
e = json.load(open("eval.json"))
if set(e) != {"valid_loss", "valid_ppl", "tokens"} or not e["tokens"] > 0: fail(f"eval: {e}")
est = json.load(open("est.json"))
rows = [l.split() for l in open("est.txt") if re.match(r"^\d ", l)]
if len(est["plans"]) != len(rows) or est["ranks"] != 4: fail(f"estimate --json: {len(est['plans'])} plans, table {len(rows)}")
for p, r in zip(est["plans"], rows):
    if p["stage"] != int(r[0]) or p["offload"] != r[1] or abs(p["device_per_rank_gib"] - float(r[6][:-1])) > 0.006:
        fail(f"estimate row {r} vs {p}")
if sum(p["deck_choice"] for p in est["plans"]) != 1: fail("estimate --json: not one deck_choice")
pre = json.load(open("preset.json"))
if not (14.7e9 < pre["params"] < 14.8e9 and pre["bytes_per_value"] == 2 and pre["ranks"] == 4):
    fail(f"estimate --preset qwen2.5-14b: {pre['params']} params, {pre['bytes_per_value']} bytes, {pre['ranks']} ranks")
rep = json.load(open("report.json"))
if rep["ranks"] != 1 or "hdf5" not in rep["versions"] or "node" not in rep: fail(f"report --json: {rep}")
print(f"metrics.jsonl: {len(train)} train + {len(ev)} eval lines; eval without targets {none}; "
      f"estimate --json {len(est['plans'])} plans; report --json ok")
sys.exit(1 if bad else 0)
PY
