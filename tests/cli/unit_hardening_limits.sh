#!/usr/bin/env bash
# Issue 14 D10 and the tokenizer items of D15: every input size is bounded, and going past a bound is exit 2 naming
# the file and the limit (docs/reliability.md): one JSONL line (16 MiB), a tokenizer file (64 MiB), the vocabulary
# (2^24 ids), with memory staying near the limit (peak RSS asserted); duplicate vocabulary ids are refused.
. "$SRC/tests/hardening_common.sh"
TOK="$SRC/tests/reference/fixtures/tokenizer/tokenizer.json"
# "${MEASURE[@]}" CMD... leaves the peak RSS (KiB) in rss.txt; rss_below MiB "what" checks it
MEASURE=(/usr/bin/time -f '%M' -o rss.txt)
[ -x /usr/bin/time ] || MEASURE=(env)
# peaks are compared with the binary's own baseline (a small prepare): a CUDA build maps the CUDA, cuBLAS and cuDNN
# libraries at start (~200 MiB resident with no GPU), a CPU build ~25 MiB; what is bounded is the growth
BASE_KIB=0
if [ -x /usr/bin/time ]; then
  /usr/bin/time -f '%M' -o base_rss.txt "$QWENFT" prepare --in t.jsonl --out base.h5 --vocab-size 320 --eos-id 256 > /dev/null 2>&1
  BASE_KIB=$(tail -1 base_rss.txt)
  echo "baseline: a small prepare peaks at $((BASE_KIB / 1024)) MiB"
fi
rss_below() { # rss_below MiB "what": peak RSS at most MiB above the baseline
  if [ ! -x /usr/bin/time ]; then echo "note: /usr/bin/time missing: $2: peak memory not checked"; return; fi
  local peak; peak=$(tail -1 rss.txt)
  [ $((peak - BASE_KIB)) -lt $(( $1 * 1024 )) ] ||
    { echo "FAIL: $2: peak RSS $((peak / 1024)) MiB, expected < baseline + $1 MiB"; fail=1; return; }
  echo "   ... peak RSS $((peak / 1024)) MiB (< baseline $((BASE_KIB / 1024)) + $1 MiB)"
}
expect 2 "D10 prepare --in /dev/zero" "/dev/zero: is not a regular file" \
  "${MEASURE[@]}" "$QWENFT" prepare --in /dev/zero --out z.h5
rss_below 200 "prepare --in /dev/zero"
[ -e z.h5 ] || [ -e z.h5.tmp ] && { echo "FAIL: prepare left z.h5"; fail=1; }
expect 2 "D10 prepare --tokenizer /dev/zero" "/dev/zero: the tokenizer is a character device, not a regular file" \
  "${MEASURE[@]}" "$QWENFT" prepare --tokenizer /dev/zero --in t.jsonl --out z.h5
rss_below 400 "prepare --tokenizer /dev/zero"
expect 2 "D10 plot /dev/zero" "/dev/zero: the metrics file is a character device, not a regular file" "${MEASURE[@]}" "$QWENFT" plot /dev/zero -o z.svg
rss_below 200 "plot /dev/zero"
head -c 17000000 /dev/zero > zero.jsonl # the line limit, now that a device is refused before reading
expect 2 "D10 plot a 17 MB line of NULs" "zero.jsonl:1: the line is longer than 16777216 bytes" "${MEASURE[@]}" "$QWENFT" plot zero.jsonl -o z.svg
rss_below 200 "plot a 17 MB line"
# a 20 MB record: over the line limit, refused by name (not "invalid JSON at column -1"); with --skip-bad it is
# a bad line like any other: skipped, counted and named in the summary (never read into memory whole)
python3 -c 'import sys; sys.stdout.write("{\"input_ids\": [" + ",".join(["7"] * 10000000) + "]}\n")' > long.jsonl
cat t.jsonl >> long.jsonl
expect 2 "D10 a 20 MB JSONL line" "long.jsonl:1: the line is longer than 16777216 bytes, the limit of one record" \
  "${MEASURE[@]}" "$QWENFT" prepare --in long.jsonl --out l.h5
rss_below 300 "a 20 MB line"
[ -e l.h5 ] && { echo "FAIL: prepare wrote l.h5 after a line over the limit"; fail=1; }
expect 0 "D10 a 20 MB JSONL line with --skip-bad" "long.jsonl:1" "${MEASURE[@]}" "$QWENFT" prepare --in long.jsonl --out l.h5 --skip-bad
rss_below 300 "a 20 MB line skipped"
# just under the limit it is a record like any other
python3 -c 'import sys; sys.stdout.write("{\"input_ids\": [" + ",".join(["7"] * 4000000) + "]}\n")' > ok.jsonl
expect 0 "an 8 MB JSONL line is accepted" "prepare:" "$QWENFT" prepare --in ok.jsonl --out ok.h5
# tokenizer ids past the vocabulary limit; duplicate vocabulary ids
python3 - "$TOK" big.json dup.json <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
t["added_tokens"].append({"id": 999999999, "content": "<|huge|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True})
json.dump(t, open(sys.argv[2], "w"))
t = json.load(open(sys.argv[1]))
v = t["model"]["vocab"]; a, b = list(v)[300:302]; v[b] = v[a]
json.dump(t, open(sys.argv[3], "w"))
PY
expect 2 "D10 added token id 999999999" "big.json: .*added_tokens\[[0-9]+\] needs an id in \[0, 16777216\) \(the vocabulary limit" \
  "${MEASURE[@]}" "$QWENFT" prepare --tokenizer big.json --in t.jsonl --out b.h5
rss_below 300 "added token id 999999999"
expect 2 "D15 duplicate vocabulary ids in tokenizer.json" "dup.json: .*model.vocab\[.*\] = [0-9]+: that id is already another token's" \
  "$QWENFT" prepare --tokenizer dup.json --in t.jsonl --out b.h5
exit $fail
