#!/usr/bin/env bash
# The layout planner (docs/zero.md "How auto plans"): `qwen-ft plan` ranks layouts that fit and refuses (exit 2,
# naming the need) a model that fits none; its memory per plan is the estimate's (the same formulas for the same
# layout); the calibration cache is written, reused and measured again for another model shape, and read from a
# file with --rates (bad files refused with exit 2); the shipped
# "auto" decks plan and estimate without their weights and choose a layout at least as fast (predicted) as the
# hand-chosen one of inputs/4090.cfg / a100.cfg; a train run with "auto" keys prints the plan and applies it.
set -euo pipefail
rm -rf "$WORK"; mkdir -p "$WORK"; cd "$WORK"
export OMP_NUM_THREADS=1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
cat > small.cfg <<'DECK'
model = { arch = "qwen3"; vocab_size = 320; hidden_size = 64; intermediate_size = 128; num_hidden_layers = 4;
          num_attention_heads = 4; num_key_value_heads = 2; head_dim = 16; init_seed = 7; tie_word_embeddings = true; };
data = { seq_len = 32; };
train_batch_size = 24;
train_micro_batch_size_per_gpu = "auto";
activation_checkpointing = "auto";
zero_optimization = { stage = "auto"; offload_optimizer = { device = "auto"; }; offload_param = { device = "auto"; }; };
max_steps = 3;
optimizer = { type = "AdamW"; params = { lr = 5e-3; }; };
eval = { every_steps = 0; };
log = { steps_per_print = 1000; };
DECK

# 1. plan --json: ranked, fitting first, each plan's memory = estimate's for that layout, micro x accum = 24
mkdir -p cache
"$QWENFT" plan small.cfg --device cpu --cache cache --top 0 --json > p1.json || fail "plan small.cfg exited $?"
python3 - p1.json <<'PY' || fails=$((fails + 1))
import json, sys
p = json.load(open(sys.argv[1]))
plans, bad = p["plans"], 0
if not plans or not plans[0]["fits"]: print("FAIL: no fitting plan first"); sys.exit(1)
fit = [q for q in plans if q["fits"]]
for a, b in zip(fit, fit[1:]):
    if b["tokens_per_s"] > a["tokens_per_s"] * 1.021: print("FAIL: not ranked by tokens/s", a, b); bad += 1
for q in plans:
    if q["micro_batch"] * q["accumulation"] != 24: print("FAIL: batch rule", q); bad += 1
    if q["stage"] == 0 and q["offload"] != "none": print("FAIL: offload at stage 0", q); bad += 1
    if q["offload"] == "optimizer+param" and q["stage"] != 3: print("FAIL: parameter offload below stage 3", q); bad += 1
print(f"plan: {len(plans)} layouts, {p['fitting']} fit, first {plans[0]['stage']}/{plans[0]['offload']}/"
      f"micro {plans[0]['micro_batch']}: {plans[0]['tokens_per_s']:.0f} tok/s; rates {p['rates_source']}")
sys.exit(bad)
PY
# the memory of a plan is estimate's row for its stage and offload at its micro batch and recomputation
read -r mb ack dev < <(python3 -c '
import json; q = [q for q in json.load(open("p1.json"))["plans"] if q["stage"] == 2 and q["offload"] == "none"][0]
print(q["micro_batch"], q["activation_checkpointing"], q["device_per_gpu_gib"])')
"$QWENFT" estimate small.cfg --json --set zero_optimization.stage=2 --set zero_optimization.offload_optimizer.device=none \
  --set zero_optimization.offload_param.device=none --set activation_checkpointing="$ack" \
  --set train_micro_batch_size_per_gpu="$mb" > est.json || fail "estimate exited $?"
python3 - est.json "$dev" <<'PY' || fails=$((fails + 1))
import json, sys
e = json.load(open(sys.argv[1])); want = float(sys.argv[2])
row = [r for r in e["plans"] if r["stage"] == 2 and r["offload"] == "none"][0]
ok = abs(row["device_per_rank_gib"] - want) <= 1e-9 + 1e-6 * want
print(f"plan's stage-2 memory {want:.6f} GiB, estimate's {row['device_per_rank_gib']:.6f} {'ok' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PY

# 2. the calibration cache: written, reused, measured again for another shape
[ -s cache/qwenft-plan-rates.json ] || fail "no calibration cache written"
python3 -c 'import json,sys; p=json.load(open("p1.json")); sys.exit(0 if p["calibration_s"] > 0 and p["rates_source"].startswith("measured") else 1)' ||
  fail "the first plan did not measure"
"$QWENFT" plan small.cfg --device cpu --cache cache --json > p2.json || fail "plan (cached) exited $?"
python3 -c 'import json,sys; p=json.load(open("p2.json")); print("second plan:", p["rates_source"]); sys.exit(0 if p["calibration_s"] == 0 and p["rates_source"].startswith("cached") else 1)' ||
  fail "the second plan did not use the cache"
# --rates FILE: another machine's cache file gives the cached plan's ranking; a bad file is refused (exit 2, naming
# the file and the field)
cp cache/qwenft-plan-rates.json rates.json
"$QWENFT" plan small.cfg --device cpu --rates rates.json --json > p2r.json || fail "plan --rates exited $?"
python3 - p2.json p2r.json <<'PY' || fail "plan --rates: another ranking than the cached rates'"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
assert b["rates_source"].startswith("read from rates.json"), b["rates_source"]
assert b["calibration_s"] == 0, b
key = lambda p: [(q["stage"], q["offload"], q["micro_batch"], q["activation_checkpointing"], q["tokens_per_s"]) for q in p["plans"]]
assert key(a) == key(b), (key(a)[:3], key(b)[:3])
print("plan --rates: the cached rates' ranking,", b["rates_source"])
PY
python3 -c 'import json; d = json.load(open("rates.json")); del d["rates"]["host_adam"]; json.dump(d, open("r_nofield.json", "w"))'
printf '{"key": "v3", "rates": [1,\n' > r_broken.json
for bad in "r_missing.json:No such file" "r_nofield.json:rates.host_adam missing" "r_broken.json:r_broken.json: line 2"; do
  rc=0; "$QWENFT" plan small.cfg --device cpu --rates "${bad%%:*}" > bad.out 2> bad.err || rc=$?
  [ "$rc" -eq 2 ] && grep -q -- "--rates ${bad%%:*}" bad.err && grep -q "${bad#*:}" bad.err ||
    { fail "plan --rates ${bad%%:*}: rc $rc"; cat bad.err; }
done
rc=0; "$QWENFT" plan small.cfg --device cpu --rates rates.json --set model.hidden_size=96 > bad.out 2> bad.err || rc=$?
[ "$rc" -eq 2 ] && grep -q "another model shape" bad.err || { fail "plan --rates of another shape: rc $rc"; cat bad.err; }
rc=0; "$QWENFT" plan small.cfg --device cpu --rates rates.json --calibrate=yes > bad.out 2> bad.err || rc=$?
[ "$rc" -eq 2 ] && grep -q "not both" bad.err || { fail "plan --rates --calibrate=yes: rc $rc"; cat bad.err; }
"$QWENFT" plan small.cfg --device cpu --cache cache --json --set model.hidden_size=96 > p3.json || fail "plan (other shape) exited $?"
python3 -c 'import json,sys; p=json.load(open("p3.json")); k=json.load(open("cache/qwenft-plan-rates.json"))["key"]; print("other shape:", p["rates_source"], "|", k); sys.exit(0 if p["rates_source"].startswith("measured") and "C96 " in k else 1)' ||
  fail "another model shape reused the cache"

# 3. a model that fits no layout: exit 2, naming GPU and host memory needs
sed -e 's/^model = .*/model = { preset = "qwen2.5-72b"; };/' -e '/^          num_attention_heads/d' small.cfg > big.cfg
rc=0; "$QWENFT" plan big.cfg --gpu-mem 8 --host-mem 64 --calibrate no > big.out 2> big.err || rc=$?
[ "$rc" -eq 2 ] && grep -q "no layout of qwen2 .* fits 1 rank.*the smallest (stage 3, offload optimizer+param.*) needs [0-9.]* GiB per GPU .* of 8.00 GiB and [0-9.]* GiB of host memory per node .* of 64.00 GiB" big.err ||
  { fail "an impossible deck: rc $rc"; cat big.err; }
rc=0; "$QWENFT" train big.cfg --set data.train=none.h5 --set checkpoint.dir=ckbig \
  --set log.dir=lbig > tbig.out 2>&1 || rc=$?
[ "$rc" -eq 2 ] && grep -q "no layout that the \"auto\" keys leave open fits" tbig.out || { fail "train of an impossible auto deck: rc $rc"; tail -3 tbig.out; }

# 4. the shipped auto decks plan and estimate without weights; their choice is predicted at least as fast as the
#    hand-chosen layout of the deck they vary (the same rates: the table's)
for spec in "4090 8 --host-mem=500" "a100 4 --gpu-mem=80 --host-mem=900"; do
  read -r name ranks opts <<<"$spec"
  # shellcheck disable=SC2086
  "$QWENFT" plan "$SRC/inputs/$name-auto.cfg" --ranks "$ranks" $opts --calibrate no --top 0 --json > "$name-auto.json" 2> "$name.err" ||
    { fail "plan inputs/$name-auto.cfg: exit $?"; cat "$name.err"; continue; }
  "$QWENFT" estimate "$SRC/inputs/$name-auto.cfg" --ranks "$ranks" --device gpu > "$name-est.out" 2>&1 ||
    { fail "estimate inputs/$name-auto.cfg"; cat "$name-est.out"; }
  grep -q "the planner's choice on table rates: stage" "$name-est.out" || fail "estimate $name-auto: no planned layout"
  python3 - "$name-auto.json" "$SRC/inputs/$name.cfg" <<'PY' || fails=$((fails + 1))
import json, re, sys
p = json.load(open(sys.argv[1])); deck = open(sys.argv[2]).read()
stage = int(re.search(r"\n  stage = (\d)", deck).group(1))
offp = 'offload_param = { device = "cpu"' in deck; offo = 'offload_optimizer = { device = "cpu"' in deck
off = "optimizer+param" if offp else "optimizer" if offo else "none"
micro = int(re.search(r"train_micro_batch_size_per_gpu = (\d+)", deck).group(1))
hand = [q for q in p["plans"] if q["stage"] == stage and q["offload"] == off and q["micro_batch"] == micro
        and q["activation_checkpointing"] == "full"]
best = p["plans"][0]
ok = best["fits"] and (not hand or best["tokens_per_s"] >= hand[0]["tokens_per_s"] * 0.999)
hs = f"{hand[0]['tokens_per_s']:.0f} tok/s ({hand[0]['device_per_gpu_gib']:.2f} GiB)" if hand else "not listed"
print(f"{sys.argv[1]}: auto {best['stage']}/{best['offload']}/micro {best['micro_batch']}/{best['activation_checkpointing']} "
      f"{best['tokens_per_s']:.0f} tok/s ({best['device_per_gpu_gib']:.2f} GiB); hand {stage}/{off}/micro {micro}/full {hs} "
      f"{'ok' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
done

# 5. a train run with "auto" keys prints the plan and applies it (the resolved deck holds the choice)
cat small.cfg > run.cfg
head -n 200 "$SRC/inputs/demo/train.jsonl" > train.jsonl
"$QWENFT" prepare --in train.jsonl --out train.h5 --vocab-size 320 --eos-id 256 > /dev/null
echo 'data = { train = "train.h5"; seq_len = 32; };' >> run.cfg
sed -i '/^data = { seq_len = 32; };$/d' run.cfg
"$QWENFT" train run.cfg --set checkpoint.dir=ck --set log.dir=l > run.out 2>&1 || { fail "auto train run exited $?"; tail -5 run.out; }
grep -q '^layout plan ("auto"): stage [0-3], offload [a-z+]*.*, micro [0-9]* x accum [0-9]*, recomputation .*; predicted .* tokens/s' run.out ||
  { fail "no layout plan in the run header"; grep -n layout run.out || true; }
grep -q '^layout plan runner-up 2: ' run.out || fail "no runner-up in the run header"
python3 - run.out <<'PY' || fails=$((fails + 1))
import re, sys
t = open(sys.argv[1]).read()
m = re.search(r'layout plan \("auto"\): stage (\d), offload (\S+?),.* micro (\d+) x accum (\d+)', t)
deck = t.split("---- resolved deck ----")[1]
stage = int(re.search(r"\n  stage = (\d+);", deck).group(1)); micro = int(re.search(r"train_micro_batch_size_per_gpu = (\d+);", deck).group(1))
acc = int(re.search(r"gradient_accumulation_steps = (\d+);", deck).group(1))
ok = m and int(m.group(1)) == stage and int(m.group(3)) == micro and int(m.group(4)) == acc and micro * acc == 24 and "done: 3 steps" in t
print(f"auto run: planned stage {m.group(1) if m else '?'} micro {m.group(3) if m else '?'} x {m.group(4) if m else '?'}; "
      f"resolved deck stage {stage} micro {micro} x {acc} {'ok' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
[ -s ck/qwenft-plan-rates.json ] || fail "the run wrote no calibration cache in checkpoint.dir"
[ "$fails" -eq 0 ] && echo "PASS" || { echo "FAIL: $fails"; exit 1; }
