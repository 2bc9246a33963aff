#!/usr/bin/env bash
# A DeepSpeed fragment (`deepspeed = "zero3.json";` with no optimizer, scheduler or batch, as the guides write it
# for the HF Trainer) trains with the HF Trainer's defaults: AdamW lr 5e-5, betas 0.9/0.999, eps 1e-8, weight decay
# 0, linear decay to 0 over the run, micro batch 8; the run header lists each defaulted key. A deck without
# `deepspeed` keeps the table's defaults, also listed. `deck --from-ds` prints those defaults as keys with their
# comments, and a data.seq_len at which the bundled demo data fills a batch: the printed deck trains as printed.
source "$SRC/tests/mpi_common.sh"
fail() { echo "FAIL: $*"; exit 1; }
MODEL='model = { arch = "qwen3"; vocab_size = 320; hidden_size = 32; intermediate_size = 64; num_hidden_layers = 2;
          num_attention_heads = 4; num_key_value_heads = 2; head_dim = 8; init_seed = 7; tie_word_embeddings = true; };'
printf '{\n  "zero_optimization": { "stage": 3, "overlap_comm": true },\n  "bf16": { "enabled": "auto" }\n}\n' > zero3.json
cat > frag.cfg <<DECK
$MODEL
data = { train = "train.h5"; seq_len = 32; };
max_steps = 4;
deepspeed = "zero3.json";
DECK
timeout 120 "$QWENFT" train frag.cfg --set checkpoint.dir=frag/ck --set log.dir=frag/l > frag.out 2>&1 ||
  { tail -20 frag.out; fail "the fragment deck did not train"; }
grep -F 'HF Trainer defaults (no optimizer, scheduler or batch in the deck, --set or zero3.json' frag.out > frag.hdr ||
  fail "the header does not list the HF Trainer's defaults: $(grep -i default frag.out)"
for want in 'optimizer.type = "AdamW"' 'optimizer.params.lr = 5e-05' 'optimizer.params.betas = [0.9, 0.999]' \
            'optimizer.params.eps = 1e-08' 'optimizer.params.weight_decay = 0.0' 'scheduler.type = "linear"' \
            'scheduler.params.warmup_num_steps = 0' 'train_micro_batch_size_per_gpu = 8' 'gradient_accumulation_steps = 1'; do
  grep -qF "$want" frag.hdr || fail "the defaults line lacks $want: $(cat frag.hdr)"
done
grep -q 'train_batch_size = 8;' frag.out || fail "micro batch 8 x 1 rank should give train_batch_size 8"
# the lr of each step: HF's linear schedule without warmup, 5e-5 * (4 - k) / 4
python3 - frag/l/metrics.jsonl <<'PY' || fail "the lr does not follow HF's linear decay"
import json, sys
lr = [json.loads(l)["lr"] for l in open(sys.argv[1]) if '"loss"' in l]
want = [5e-5, 3.75e-5, 2.5e-5, 1.25e-5]
print("lr per step:", lr)
sys.exit(0 if len(lr) == 4 and all(abs(a - b) <= 1e-12 for a, b in zip(lr, want)) else 1)
PY
# the deck's own optimizer wins over the defaults, and is then not listed
timeout 120 "$QWENFT" train frag.cfg --set checkpoint.dir=own/ck --set log.dir=own/l --set optimizer.params.lr=1e-4 \
  --set max_steps=1 > own.out 2>&1 || { tail -20 own.out; fail "the deck with its own lr did not train"; }
grep 'HF Trainer defaults' own.out | grep -q 'optimizer.params.lr' && fail "a given optimizer is listed as defaulted"
grep 'HF Trainer defaults' own.out | grep -qF 'scheduler.type = "linear"' && grep 'HF Trainer defaults' own.out | grep -qF 'optimizer.params.weight_decay = 0.0' || fail "the other defaults are gone: $(grep 'HF Trainer' own.out)"
# without `deepspeed`: the table's defaults (DeepSpeed's), listed too
printf '%s\ndata = { train = "train.h5"; seq_len = 32; };\nmax_steps = 1;\n' "$MODEL" > plain.cfg
timeout 120 "$QWENFT" train plain.cfg --set checkpoint.dir=plain/ck --set log.dir=plain/l > plain.out 2>&1 ||
  { tail -20 plain.out; fail "the plain deck did not train"; }
grep -F 'defaults (not in the deck; docs/deck.md): ' plain.out | grep -qF 'optimizer.params.lr = 0.001' ||
  fail "the plain deck's header does not list its defaulted lr: $(grep -i default plain.out)"
grep -q 'HF Trainer defaults' plain.out && fail "a deck without deepspeed got the HF defaults"
# deck --from-ds on the fragment, with the bundled demo data (prepared whole): placeholders, and a deck that trains
"$QWENFT" prepare --in "$SRC/inputs/demo/train.jsonl" --out demo.h5 --vocab-size 320 --eos-id 256 > /dev/null
"$QWENFT" deck --from-ds zero3.json --train demo.h5 > tr.body || fail "deck --from-ds exited non-zero"
grep -q '^# ---- not in zero3.json: the HF Trainer' tr.body || fail "no placeholder heading: $(cat tr.body)"
grep -q '^optimizer = { type = "AdamW"; params = { lr = 5e-5;' tr.body || fail "no optimizer placeholder"
grep -q '^scheduler = { type = "linear"' tr.body || fail "no scheduler placeholder"
grep -q '^train_micro_batch_size_per_gpu = 8;' tr.body || fail "no micro batch placeholder"
grep -q '^# epochs = 3;' tr.body || fail "no commented run length"
grep -q '^data = { train = "demo.h5"; seq_len = 2048; };$' tr.body || fail "the data line for the demo data: $(grep ^data tr.body)"
# a smaller dataset (400 records: 4 rows of 2048) gets the seq_len at which it fills one batch of 8
"$QWENFT" deck --from-ds zero3.json --train train.h5 > small.body || fail "deck --from-ds (small data) exited non-zero"
grep -q '^data = { train = "train.h5"; seq_len = 1024; };  # seq_len 2048 would pack train.h5 into fewer rows than one batch of 8; at 1024: [0-9]* rows' small.body ||
  fail "the data line does not fit the small data: $(grep ^data small.body)"
{ echo "$MODEL"; cat small.body; } > small.cfg
timeout 300 "$QWENFT" train small.cfg --set max_steps=1 --set checkpoint.dir=small/ck --set log.dir=small/l > small.out 2>&1 ||
  { tail -20 small.out; fail "the translated deck does not train on the small data"; }
{ echo "$MODEL"; cat tr.body; } > tr.cfg
timeout 300 "$QWENFT" train tr.cfg --set max_steps=1 --set checkpoint.dir=tr/ck --set log.dir=tr/l > tr.out 2>&1 ||
  { tail -20 tr.out; fail "the translated deck does not train on the demo data"; }
# the translation resolves to the same deck as the fragment read with `deepspeed`
printf '%s\ndata = { train = "demo.h5"; seq_len = 2048; };\ndeepspeed = "zero3.json";\n' "$MODEL" > dsd.cfg
timeout 300 "$QWENFT" train dsd.cfg --set max_steps=1 --set checkpoint.dir=tr/ck2 --set log.dir=tr/l2 > dsd.out 2>&1 ||
  { tail -20 dsd.out; fail "the fragment deck does not train on the demo data"; }
resolved() { sed -n '/^---- resolved deck ----$/,/^-----------------------$/p' "$1" | grep -v '^# qwen-ft deck, resolved' |
  sed -e 's#"tr/ck2*"#CK#' -e 's#"tr/l2*"#LOG#'; }
diff <(resolved tr.out) <(resolved dsd.out) || fail "the translation and the fragment resolve to different decks"
# -o in another directory: the data path, relative to here, is written as that deck reads it (absolute)
mkdir -p out && "$QWENFT" deck --from-ds zero3.json --train demo.h5 -o out/tr.cfg || fail "deck -o out/tr.cfg"
grep -q "^data = { train = \"$PWD/demo.h5\";" out/tr.cfg || fail "-o out/tr.cfg: $(grep ^data out/tr.cfg)"
echo "PASS: HF Trainer defaults for a DeepSpeed fragment (lr per step $(python3 -c 'print(5e-5)')...), listed in the header; deck --from-ds placeholders train on the demo data"
