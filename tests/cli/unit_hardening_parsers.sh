#!/usr/bin/env bash
# Issue 22 items 4-8 (docs/reliability.md): the DeepSpeed JSON and deck parsers are linear and bounded (a 50k-key
# JSON, a 40k-setting deck and 8 MB / 20 MB comment lines end in under 2 s each), non-regular files are refused
# before reading (no FIFO blocks, a directory is no "out of memory"), @include is strict, and tokenizer files are
# checked: a cut qwen.tiktoken by its rank count (Qwen v1's 151,643 unless QWENFT_TIKTOKEN_RANKS says otherwise; the
# real file: ref_qwen_v1_tiktoken) and against the model's generation_config.json, tokenizer.json's added tokens against
# its vocabulary, and a dataset's tokenizer against the model's.
. "$SRC/tests/hardening_common.sh"
# The bounds are on the parsing, not on the process's start-up: MPI_Init alone varies by machine (Open MPI's PMIx
# retries a munge socket for about 2.3 s where munge is installed but munged is not running), so each bound is
# SECONDS past the start-up, measured once as the wall time of `estimate` on a deck that does not exist.
start_ms() {
  local t0 t1; t0=$(date +%s%N)
  "$QWENFT" estimate no-such-deck.cfg > /dev/null 2>&1
  t1=$(date +%s%N)
  echo $(( (t1 - t0) / 1000000 ))
}
START_MS=$(start_ms)
echo "start-up (estimate on a missing deck): $START_MS ms"
fast() { # fast SECONDS CODE "what" "ERE" cmd...: expect, and within SECONDS of wall time past the start-up
  local lim=$1; shift
  local t0 t1; t0=$(date +%s%N)
  expect "$@" || return 1
  t1=$(date +%s%N)
  local ms=$(( (t1 - t0) / 1000000 ))
  [ $ms -lt $((lim * 1000 + START_MS)) ] ||
    { echo "FAIL: $2: took $ms ms, more than ${lim} s past the start-up's $START_MS ms"; fail=1; return 1; }
  echo "   ... $ms ms"
}
python3 - <<'PY'
import json
d = {"train_batch_size": 8, "zero_optimization": {"k%d" % i: i for i in range(50000)}}
open("ds50k.json", "w").write(json.dumps(d, indent=1))
d = {"train_batch_size": 8, "zero_optimization": {"stage": 2, "stage3_gather_16bit_weights_on_model_save": True}}
d["zero_optimization"].update({"k%d" % i: i for i in range(3000)})
open("ds3k.json", "w").write(json.dumps(d, indent=1))
with open("deck40k.cfg", "w") as f:
    f.write("g = {\n" + "".join("  k%d = %d;\n" % (i, i) for i in range(40000)) + "};\n")
open("comment8m.cfg", "w").write("# " + "x" * 8000000 + "\ntrain_batch_size = 4;\n")
open("comment20m.cfg", "w").write("# " + "x" * 20000000 + "\n")
open("longline.cfg", "w").write("train_batch_size = 4; # " + "x" * 70000 + "\n")
PY
# 4: quadratic parsing, refused by the caps in well under 2 s past the start-up
fast 2 2 "a DeepSpeed JSON of 50k keys" "ds50k.json: more than 4096 keys and list values, the limit of a DeepSpeed config" \
  "$QWENFT" deck --from-ds ds50k.json
fast 2 2 "3k keys (under the cap): line numbers in one pass" "ds3k.json:[0-9]+: unknown key 'zero_optimization.k" \
  "$QWENFT" deck --from-ds ds3k.json
fast 2 2 "a deck of 40k settings" "deck40k.cfg:4097: more than 4096 settings in the deck" "$QWENFT" estimate deck40k.cfg
fast 2 2 "a deck with an 8 MB comment line" "comment8m.cfg: the deck is 8000025 bytes, more than the limit of 4194304" \
  "$QWENFT" estimate comment8m.cfg
fast 2 2 "a deck with a 20 MB comment line" "comment20m.cfg: the deck is 20000003 bytes" "$QWENFT" estimate comment20m.cfg
fast 2 2 "a 70 KB deck line" "longline.cfg:1: a line longer than 65536 bytes, the limit of a deck line" \
  "$QWENFT" estimate longline.cfg
# 5: size caps and directories
truncate -s 2G big.json
fast 2 2 "a 2 GB DeepSpeed JSON" "big.json: the DeepSpeed config is 2147483648 bytes, more than the limit of 4194304" \
  "$QWENFT" deck --from-ds big.json
rm -f big.json
mkdir jdir
expect 2 "a directory as the DeepSpeed JSON" "jdir: the DeepSpeed config is a directory, not a regular file" \
  "$QWENFT" deck --from-ds jdir
printf 'deepspeed = "jdir";\n' > dsdir.cfg
expect 2 "a directory as deck key deepspeed" "the DeepSpeed config is a directory" "$QWENFT" estimate dsdir.cfg
# 6: FIFOs are refused, never waited on (timeout 300 in expect would show as exit 124)
mkfifo ds.fifo inc.fifo deck.fifo
fast 2 2 "a FIFO as --from-ds" "ds.fifo: the DeepSpeed config is a FIFO \(named pipe\), not a regular file" \
  "$QWENFT" deck --from-ds ds.fifo
printf 'train_batch_size = 4;\n@include "inc.fifo"\n' > incfifo.cfg
fast 2 2 "a FIFO as @include" "./inc.fifo: the included deck file is a FIFO \(named pipe\), not a regular file \(included at incfifo.cfg:2\)" \
  "$QWENFT" estimate incfifo.cfg
fast 2 2 "a FIFO as the deck" "deck.fifo: the deck is a FIFO" "$QWENFT" estimate deck.fifo
fast 2 2 "a FIFO as the tokenizer" "ds.fifo: the tokenizer is a FIFO" "$QWENFT" prepare --in t.jsonl --out f.h5 --tokenizer ds.fifo
# 7: @include strict
echo "gradient_accumulation_steps = 2;" > x.cfg
printf 'train_batch_size = 4;\n@include "x.cfg' > unterm.cfg
expect 2 "an unterminated @include on the last line" "unterm.cfg:2: unterminated @include: the file name has no closing" \
  "$QWENFT" estimate unterm.cfg
printf 'train_batch_size = 4;\n@include x.cfg\n' > bare.cfg
expect 2 "an @include without quotes" "bare.cfg:2: malformed @include: expected @include \"FILE\"" "$QWENFT" estimate bare.cfg
printf '@include "x.cfg" train_batch_size = 4;\n' > trail.cfg
expect 2 "an @include with a setting after it" "trail.cfg:1: malformed @include: \"train_batch_size = 4;\" after the file name" \
  "$QWENFT" estimate trail.cfg
printf '@include "unterm.cfg"\n' > nested.cfg
expect 2 "an unterminated @include in an included file" "./unterm.cfg:2: unterminated @include.*\(included at nested.cfg:1\)" \
  "$QWENFT" estimate nested.cfg
printf '# @include "nothing.cfg\nx = "@include \\"y";\n@include "x.cfg"  # a comment\n' > ok.cfg
expect 2 "@include in a comment or string is not one; a good one with a comment passes the scan" "ok.cfg:2: unknown key 'x'" \
  "$QWENFT" estimate ok.cfg
# 8: a qwen.tiktoken cut at a line boundary, beside the model files that name its eos
FIX="$SRC/tests/reference/fixtures/tokenizer"
mkdir -p v1 v1cut v1cut2
cp "$FIX/qwen.tiktoken" v1/
head -n 1000 "$FIX/qwen.tiktoken" > v1cut/qwen.tiktoken
head -n 1900 "$FIX/qwen.tiktoken" > v1cut2/qwen.tiktoken
for d in v1 v1cut v1cut2; do echo '{"eos_token_id": 2000, "pad_token_id": 2000}' > $d/generation_config.json; done
echo '{"text": "hello world"}' > text.jsonl
expect 0 "the whole qwen.tiktoken" "prepare: wrote v1.h5" "$QWENFT" prepare --in text.jsonl --out v1.h5 --tokenizer v1
# without the model files: the rank count is the check (2000 ranks stated by the test env, QWENFT_TIKTOKEN_RANKS)
cp v1cut/qwen.tiktoken bare.tiktoken
expect 2 "a bare qwen.tiktoken cut to 1000 ranks (QWENFT_TIKTOKEN_RANKS=2000)" "bare.tiktoken: 1000 ranks, but QWENFT_TIKTOKEN_RANKS=2000: the file is cut short" \
  "$QWENFT" prepare --in text.jsonl --out cut.h5 --tokenizer bare.tiktoken
expect 2 "a bare qwen.tiktoken cut to 1000 ranks (nothing stated)" "bare.tiktoken: 1000 ranks, but Qwen v1's qwen.tiktoken has 151643 .*set QWENFT_TIKTOKEN_RANKS=1000" \
  env -u QWENFT_TIKTOKEN_RANKS "$QWENFT" prepare --in text.jsonl --out cut.h5 --tokenizer bare.tiktoken
expect 2 "a qwen.tiktoken cut to 1000 ranks, beside generation_config.json" "v1cut/qwen.tiktoken: 1000 ranks, but QWENFT_TIKTOKEN_RANKS=2000" \
  "$QWENFT" prepare --in text.jsonl --out cut.h5 --tokenizer v1cut
# the count stated wrongly (as the cut size): the model files beside it still catch it
export QWENFT_TIKTOKEN_RANKS=1000
expect 2 "a qwen.tiktoken cut to 1000 ranks, stated as 1000" "v1cut/generation_config.json: eos_token_id names id 2000, but the tokenizer v1cut/qwen.tiktoken has only 1208 ids \(its <\|endoftext\|> is 1000\)" \
  "$QWENFT" prepare --in text.jsonl --out cut.h5 --tokenizer v1cut
expect 2 "a qwen.tiktoken cut to 1900 ranks (2000 is then <|extra_97|>)" "eos_token_id names id 2000, which is \"<\|extra_97\|>\" in the tokenizer v1cut2/qwen.tiktoken, not a special token" \
  env QWENFT_TIKTOKEN_RANKS=1900 "$QWENFT" prepare --in text.jsonl --out cut.h5 --tokenizer v1cut2/qwen.tiktoken
export QWENFT_TIKTOKEN_RANKS=2000
[ -e cut.h5 ] && { echo "FAIL: a refused tokenizer left cut.h5"; fail=1; }
# 8: tokenizer.json added tokens against the vocabulary
python3 - "$FIX/tokenizer.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
a = json.loads(json.dumps(t)); a["added_tokens"][0]["id"] = 5            # <|endoftext|> on a vocabulary id
json.dump(a, open("added_clash.json", "w"))
b = json.loads(json.dumps(t)); b["model"]["vocab"]["<|im_end|>"] = 2500  # the vocabulary says another id
json.dump(b, open("added_disagree.json", "w"))
PY
expect 2 "an added token on another token's id" "added_tokens\[0\] \"<\|endoftext\|>\" has id 5, which is already another token's" \
  "$QWENFT" prepare --in text.jsonl --out a.h5 --tokenizer added_clash.json
expect 2 "an added token the vocabulary numbers otherwise" "added_tokens\[2\] \"<\|im_end\|>\" has id 2002, but model.vocab gives it 2500" \
  "$QWENFT" prepare --in text.jsonl --out a.h5 --tokenizer added_disagree.json
# 4: a dataset made with another tokenizer than the model's (import records the model's)
python3 "$SRC/tests/reference/widen_fixture.py" "$SRC/tests/reference/fixtures/qwen2_gqa_untied/hf" wide > /dev/null
cp "$FIX/tokenizer.json" wide/
"$QWENFT" import --from wide --out wide.h5 > /dev/null || { echo "FAIL: import wide"; fail=1; }
"$QWENFT" prepare --in text.jsonl --out hf.h5 --tokenizer wide > /dev/null || { echo "FAIL: prepare hf.h5"; fail=1; }
sed -e 's|^model = .*|model = { from = "wide.h5"; };|' d.cfg > w.cfg
expect 2 "train on data of another tokenizer" "v1.h5 \(data.train\): made with the tokenizer qwen.tiktoken sha256:[0-9a-f]+ \(attribute .tokenizer.\), but the model wide.h5 records hf-tokenizer.json sha256:" \
  "$QWENFT" train w.cfg --set data.train=v1.h5 --set data.valid=v1.h5
expect 2 "eval on data of another tokenizer (model.from an HF directory)" "v1.h5 \(data.valid\): made with the tokenizer qwen.tiktoken.*but the model wide records hf-tokenizer.json" \
  "$QWENFT" eval w.cfg --set model.from=wide --set data.valid=v1.h5
if "$QWENFT" eval w.cfg --set data.valid=hf.h5 > out.txt 2> err.txt || ! grep -q "made with the tokenizer" err.txt; then
  echo "ok: the model's own tokenizer passes the identity check"
else
  echo "FAIL: data of the model's own tokenizer refused: $(head -c 300 err.txt)"; fail=1
fi
exit $fail
