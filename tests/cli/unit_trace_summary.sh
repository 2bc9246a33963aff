#!/usr/bin/env bash
# bench/trace_summary.py (the GPU timeline of bench/kernel_trace.c, summarised) on a synthetic trace whose figures
# are known: a loop of steps (2 layers of qkv 10 us, attn 12 us overlapping qkv by 1 us, mlp 60 us after a 3 us
# gap; then argmax 5 us), 20 us of host time between steps, a warm-up step of another shape; the whole-run table,
# the per-step table (per-kernel mean, gap, per-step time; a kernel in two places of the step a row per place) and
# the busy/idle split; bad input exits 2 naming the file and line.
set -euo pipefail
rm -rf "$WORK"; mkdir -p "$WORK"; cd "$WORK"
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
S="$SRC/bench/trace_summary.py"
python3 - <<'PY'
rows, t = [], 1_000_000
def k(name, dur, gap=0, grid=132, block=256):
    global t
    t += gap
    rows.append(f"K,{t},{t + dur},7,0,{grid},{block},{name}")
    t += dur
k("_Z10warmup_oneILi1EEvPf", 50_000)            # a warm-up step of another shape
k("_Z18argmax_rows_kernelI13__nv_bfloat16EvPiPfPKT_i", 5_000, 2_000)
for step in range(10):
    t += 20_000                                   # host work between steps
    for layer in range(2):
        k("_Z17decode_qkv_kernelI13__nv_bfloat16Li1ELi8ELi3EEv12df_qkv_args", 10_000, 0 if layer == 0 else 3_000)
        k("_Z17attn_split_kernelI13__nv_bfloat16EvPT_", 12_000, -1_000, 68, 128)
        k("_Z17decode_mlp_kernelI13__nv_bfloat16Li1EEvPT_", 60_000, 3_000, 2368, 256)
    k("_Z18argmax_rows_kernelI13__nv_bfloat16EvPiPfPKT_i", 5_000, 0)
rows.append(f"C,{t + 1000},{t + 3000},7,0,0,0,copy DtoH 4 bytes")
with open("t.csv", "w") as f:
    f.write("kind,start_ns,end_ns,stream,graph_node,grid,block,name\n" + "\n".join(rows) + "\n")
PY
python3 "$S" t.csv --step-kernel argmax --skip 1 > out.txt 2> err.txt || fail "exit $? on a good trace: $(cat err.txt)"
cat out.txt
grep -Eq "^  decode_mlp_kernel +20 +1.200 +60.00$" out.txt || fail "whole-run row of decode_mlp (20 calls, 1.2 ms, 60 us)"
grep -Eq "^  argmax_rows_kernel +11 " out.txt || fail "argmax_rows_kernel: 11 calls"
grep -q "steps ending with 'argmax': 9 taken, 9 of the usual 7 activities" out.txt || fail "9 steps of 7 kernels"
# a step: 10 + 12 - 1 + 3 + 60 + 3 + 10 + 12 - 1 + 3 + 60 + 5 = 176 us from first start to last end; 20 us before it
grep -q "step: median 176.0 us from its first kernel's start to its last's end; median gap before it 20.0 us" out.txt ||
  fail "the step's span and the gap before it"
grep -q "per step: kernels 169.0 us, gaps between them 7.0 us" out.txt || fail "kernels 2*(10+12+60)+5 = 169, gaps 2*(-1+3)+3 = 7"
grep -Eq "^  attn_split_kernel +2 +12.00 +-1.00 +22.0 +68 x 128" out.txt || fail "attention: 12 us, overlapping 1 us"
# q/k/v runs in two places of the step (after the previous step's argmax, after the first layer's MLP): a row each
grep -Eq "^  decode_qkv_kernel after argmax_rows_kernel +1 +10.00 +0.00 +10.0 " out.txt || fail "qkv after argmax"
grep -Eq "^  decode_qkv_kernel after decode_mlp_kernel +1 +10.00 +3.00 +13.0 " out.txt || fail "qkv after the MLP: gap 3"
grep -Eq "^  decode_qkv_kernel +2 +10.00 " out.txt && fail "qkv's two places folded into one per-step row"
grep -q "GPU busy" out.txt || fail "busy/idle line"
# the last 0.4 ms: the copy, the last argmax, the last step's 6 kernels (the steps are 196 us apart) and part of the
# step before it
python3 "$S" t.csv --last-ms 0.4 > last.txt 2> err.txt || fail "exit $? with --last-ms: $(cat err.txt)"
grep -q "t.csv, its last 0.4 ms: " last.txt || fail "--last-ms title"
grep -Eq "^  copy DtoH +1 " last.txt || fail "--last-ms keeps the copy at the end"
grep -q "warmup_one" last.txt && fail "--last-ms keeps the warm-up at the start"
n=$(awk '/decode_mlp_kernel/ {print $2}' last.txt)
[ "$n" = 4 ] || fail "--last-ms 0.4: 4 decode_mlp kernels (2 steps), got '$n'"
# bad input: exit 2, file and line named
printf 'kind,start_ns,end_ns,stream,graph_node,grid,block,name\nK,1,2,3\n' > bad.csv
set +e
python3 "$S" bad.csv > /dev/null 2> err.txt; rc=$?
set -e
[ $rc = 2 ] && grep -q "bad.csv:2: 4 fields, 8 expected" err.txt || fail "short line: rc $rc, $(cat err.txt)"
printf 'start,end\n' > nohead.csv
set +e
python3 "$S" nohead.csv > /dev/null 2> err.txt; rc=$?
python3 "$S" t.csv --step-kernel nosuch > /dev/null 2> err2.txt; rc2=$?
set -e
[ $rc = 2 ] && grep -q "not a kernel_trace.c CSV" err.txt || fail "no header: rc $rc"
[ $rc2 = 2 ] && grep -q "0 steps end with a kernel named like 'nosuch'" err2.txt || fail "unknown step kernel: rc $rc2"
[ $fails = 0 ] || { echo "$fails failures"; exit 1; }
echo "unit_trace_summary: ok"
