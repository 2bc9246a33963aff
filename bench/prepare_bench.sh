#!/usr/bin/env bash
# prepare_bench.sh [MB] [RANKS...] — prepare's throughput against HF `tokenizers` (docs/performance.md, "prepare"):
# trains the 151k-vocabulary BPE (bench/prepare_bench.py bpe), writes MB megabytes (default 100) of 4 KB text
# records, then times `qwen-ft prepare` on 1 rank and under `mpirun -np N` for each N of RANKS (default "2"), and
# HF encode_batch on the same texts with 1 thread and with one per rank count. Needs `tokenizers` (pip).
# Env: QWENFT (default build/qwen-ft), DIR (scratch, default /tmp/qwenft-prepare-bench).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
Q=${QWENFT:-$root/build/qwen-ft}
DIR=${DIR:-/tmp/qwenft-prepare-bench}
MB=${1:-100}; shift || true
RANKS=${*:-2}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OMP_NUM_THREADS=1
mkdir -p "$DIR"
[ -f "$DIR/bpe/tokenizer.json" ] || python3 "$root/bench/prepare_bench.py" bpe "$DIR/bpe"
[ -f "$DIR/corpus.jsonl" ] || python3 "$root/bench/prepare_bench.py" corpus "$DIR/corpus.jsonl" "$MB"
TOK=$DIR/bpe/tokenizer.json
echo "load average before: $(cut -d" " -f1-3 /proc/loadavg)"
echo "date: $(date -u +%FT%TZ); host: $(uname -n), $(getconf _NPROCESSORS_ONLN) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'))"
echo "corpus: $(stat -c %s "$DIR/corpus.jsonl") bytes, $(wc -l < "$DIR/corpus.jsonl") records; tokenizer vocabulary $(python3 -c "import json,sys; j=json.load(open(sys.argv[1])); print(len(j['model']['vocab']) + len(j['added_tokens']))" "$TOK")"
for np in 1 $RANKS; do
  for mode in check write; do
    rm -f "$DIR/out.h5"
    args=(--tokenizer "$TOK" --in "$DIR/corpus.jsonl")
    [ $mode = check ] && args+=(--check) || args+=(--out "$DIR/out.h5")
    if [ "$np" = 1 ]; then run=("$Q" prepare); else run=(mpirun -np "$np" "$Q" prepare); fi
    /usr/bin/time -f "%e %U %S" -o "$DIR/time.txt" "${run[@]}" "${args[@]}" > "$DIR/p.txt"
    tok=$(sed -n 's/.*tokens \([0-9]*\), trained.*/\1/p' "$DIR/p.txt")
    read -r wall user sys < "$DIR/time.txt"
    python3 -c "import sys; b, t, w, c = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]) + float(sys.argv[5]); print(f'qwen-ft prepare np={sys.argv[6]} {sys.argv[7]:5}: wall {w:6.2f} s, cpu {c:6.2f} s (whole processes: tokenizer load, JSON, tokenize, write), {b/1e6/w:6.2f} MB/s, {b/1e6/c:6.2f} MB per cpu-s, {t/w:10.0f} tokens/s, {t} tokens')" \
      "$(stat -c %s "$DIR/corpus.jsonl")" "$tok" "$wall" "$user" "$sys" "$np" "$mode"
    if [ "$np" = 1 ] && [ $mode = write ]; then h5dump -d /tokens -b LE -o "$DIR/tokens.bin" "$DIR/out.h5" > /dev/null; fi
  done
done
for th in 1 $RANKS; do
  RAYON_NUM_THREADS=$th python3 "$root/bench/prepare_bench.py" hf "$TOK" "$DIR/corpus.jsonl" "$DIR/tokens.bin" |
    sed "s/^/HF tokenizers encode_batch: /"
done
