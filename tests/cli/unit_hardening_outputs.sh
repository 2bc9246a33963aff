#!/usr/bin/env bash
# Issue 22 items 1-3, 5, 9 (docs/reliability.md, "Outputs"): the output rule of every command that writes
# (kernels/base/out_file.h). An output that is an input (also through a glob, a symlink, ./ and --valid-out), or
# that exists and is not a regular file, is exit 2 before anything is written, with the input byte-identical;
# two writers of one output never publish a mix (20 concurrent pairs); `deck --from-ds X -o OUT` leaves OUT as it
# was when X is broken; a closed stdout leaves no temporaries. Each case: exit code, message, the files untouched.
. "$SRC/tests/hardening_common.sh"
untouched() { # untouched FILE COPY "what"
  cmp -s "$1" "$2" || { echo "FAIL: $3: $1 was modified"; fail=1; }
}
no_temporaries() { # no_temporaries "what": no *.tmp-*, *.spill-*, *.lock left in the working directory
  local left
  left=$(find . -maxdepth 2 \( -name '*.tmp-*' -o -name '*.spill-*' -o -name '*.lock' \) | head -3)
  [ -z "$left" ] || { echo "FAIL: $1: left behind: $left"; fail=1; }
}
printf '{"input_ids":[1,2,3]}\n{"input_ids":[4,5]}\n{"input_ids":[6,7,8,9]}\n' > same.jsonl
cp same.jsonl same.copy
# 2: an output that is an input
expect 2 "prepare --out = --in" "--out same.jsonl is the same file as the input same.jsonl" \
  "$QWENFT" prepare --in same.jsonl --out same.jsonl
expect 2 "prepare --out = an input of a glob, spelt ./" "--out ./same.jsonl is the same file as the input same.jsonl" \
  "$QWENFT" prepare --in 'sam*.jsonl' --out ./same.jsonl
ln -s same.jsonl link.h5
expect 2 "prepare --out = a symlink to the input" "--out link.h5 is the same file as the input same.jsonl" \
  "$QWENFT" prepare --in same.jsonl --out link.h5
expect 2 "prepare --valid-out = the input" "--valid-out same.jsonl is the same file as the input same.jsonl" \
  "$QWENFT" prepare --in same.jsonl --out o.h5 --valid-fraction 0.5 --valid-out same.jsonl
expect 2 "prepare --valid-out = --out under another spelling" "--valid-out ./o.h5 is the same file as --out o.h5" \
  "$QWENFT" prepare --in same.jsonl --out o.h5 --valid-fraction 0.5 --valid-out ./o.h5
untouched same.jsonl same.copy "prepare refusals"
[ -e o.h5 ] && { echo "FAIL: a refused prepare wrote o.h5"; fail=1; }
# 2: an output that exists and is not a regular file (a FIFO stands for /dev/null: same rule, no root needed)
mkfifo fifo.h5
expect 2 "prepare --out FIFO" "--out fifo.h5: exists and is a FIFO \(named pipe\), not a regular file" \
  "$QWENFT" prepare --in same.jsonl --out fifo.h5
[ -p fifo.h5 ] || { echo "FAIL: the FIFO was replaced"; fail=1; }
mkdir adir
expect 2 "prepare --out a directory" "--out adir: exists and is a directory" "$QWENFT" prepare --in same.jsonl --out adir
if [ -c /dev/null ] && [ -w /dev/null ]; then
  expect 2 "deck -o /dev/null" "-o /dev/null: exists and is a character device" \
    "$QWENFT" deck --keys -o /dev/null
  [ -c /dev/null ] || { echo "FAIL: /dev/null is no longer a device"; fail=1; }
fi
# import: the output inside the source directory, over its own weights
cp -r "$SRC/tests/reference/fixtures/qwen2_tied/hf" m
cp m/model.safetensors weights.copy
expect 2 "import --out = the source weights" "--out m/model.safetensors is the same file as the input m/model.safetensors" \
  "$QWENFT" import --from m --out m/model.safetensors
untouched m/model.safetensors weights.copy "import refusal"
expect 0 "import elsewhere" "import: wrote m.h5" "$QWENFT" import --from m --out m.h5
# plot: the output is one of the metrics files
printf '{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.5}\n' > metrics.jsonl
cp metrics.jsonl metrics.copy
ln -s metrics.jsonl metrics.svg
expect 2 "plot --out = the metrics file (symlink)" "--out metrics.svg is the same file as the input metrics.jsonl" \
  "$QWENFT" plot metrics.jsonl --out metrics.svg
untouched metrics.jsonl metrics.copy "plot refusal"
expect 0 "plot elsewhere" "plot: c.svg" "$QWENFT" plot metrics.jsonl --out c.svg
# 3: deck --from-ds X -o OUT reads and translates X before OUT is touched
echo '{"train_batch_size": 8, "gradient_accumulation_steps": 2}' > ds.json
cp ds.json ds.copy
expect 2 "deck -o = the JSON" "-o ds.json is the same file as the input ds.json" "$QWENFT" deck --from-ds ds.json -o ds.json
untouched ds.json ds.copy "deck -o X"
echo "# my deck" > OUT.cfg
cp OUT.cfg OUT.copy
printf '{"train_batch_size": \n' > broken.json
expect 2 "deck -o OUT from a broken JSON" "broken.json:2: column 0: not valid JSON" \
  "$QWENFT" deck --from-ds broken.json -o OUT.cfg
untouched OUT.cfg OUT.copy "deck -o OUT with a broken X"
"$QWENFT" deck --from-ds ds.json -o OUT.cfg || { echo "FAIL: deck -o OUT: exit $?"; fail=1; }
grep -q "train_batch_size = 8" OUT.cfg || { echo "FAIL: deck -o wrote no translation"; fail=1; }
no_temporaries "refusals and successes"
# 1: two prepare runs on one --out, 20 times: either the second is refused naming the holder, or the runs did not
# overlap; the published file is always one run's whole result (its source names the input its tokens come from)
python3 - <<'PY'
import json
for name, tok, n in (("A.jsonl", 7, 20), ("B.jsonl", 9, 30)):
    with open(name, "w") as f:
        f.write("".join(json.dumps({"input_ids": [tok] * n}) + "\n" for _ in range(20000)))
PY
refused=0
for i in $(seq 1 20); do
  rm -f C.h5
  "$QWENFT" prepare --in A.jsonl --out C.h5 > a.out 2> a.err & pa=$!
  "$QWENFT" prepare --in B.jsonl --out C.h5 > b.out 2> b.err & pb=$!
  wait $pa; ra=$?; wait $pb; rb=$?
  for r in "$ra:a" "$rb:b"; do
    case ${r%%:*} in
      0) ;;
      2) grep -qE "is being written by another process \(lock file C.h5.lock: host .* pid [0-9]+ since" "${r#*:}.err" ||
           { echo "FAIL: trial $i: exit 2 without naming the holder: $(head -c 300 "${r#*:}.err")"; fail=1; }
         refused=$((refused + 1)) ;;
      *) echo "FAIL: trial $i: prepare exit ${r%%:*}: $(head -c 300 "${r#*:}.err")"; fail=1 ;;
    esac
  done
  src=$(h5dump -a source C.h5 | grep -oE '"[AB].jsonl"' | tr -d '"')
  maxt=$(h5dump -a max_token_id C.h5 | grep -oE '\(0\): [0-9]+' | grep -oE '[0-9]+$')
  ntok=$(h5dump -a n_tokens C.h5 | grep -oE '\(0\): [0-9]+' | grep -oE '[0-9]+$')
  first=$(h5dump -d /tokens -s 0 -c 1 C.h5 | grep -oE '\(0\): [0-9]+' | grep -oE '[0-9]+$')
  last=$(h5dump -d /tokens -s $((ntok - 1)) -c 1 C.h5 | grep -oE '\([0-9]+\): [0-9]+' | grep -oE '[0-9]+$')
  case "$src:$maxt:$ntok:$first:$last" in
    A.jsonl:7:400000:7:7 | B.jsonl:9:600000:9:9) ;;
    *) echo "FAIL: trial $i: a mixed dataset: source $src, max_token_id $maxt, n_tokens $ntok, tokens $first..$last"; fail=1 ;;
  esac
done
echo "ok: 20 concurrent pairs: every published C.h5 is one run's whole result ($refused second writers refused)"
no_temporaries "concurrent writers"
# 5: a closed stdout: no death by SIGPIPE, the dataset complete, no spill files or temporaries left
rm -f C.h5
"$QWENFT" prepare --in A.jsonl --out C.h5 2> pipe.err | true
[ -s C.h5 ] && h5dump -a n_tokens C.h5 | grep -q "400000" || { echo "FAIL: prepare | true: no complete C.h5 ($(head -c 200 pipe.err))"; fail=1; }
"$QWENFT" prepare --in A.jsonl --out D.h5 | head -c 1 > /dev/null
[ -s D.h5 ] && h5dump -a n_tokens D.h5 | grep -q "400000" || { echo "FAIL: prepare | head -c 1: no complete D.h5"; fail=1; }
no_temporaries "a closed stdout"
[ $fail -eq 0 ] && echo "ok: prepare | true, prepare | head -c 1: datasets complete, nothing left behind"
exit $fail
