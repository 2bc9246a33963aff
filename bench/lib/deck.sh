# shellcheck shell=bash
# bench/lib/deck.sh — the random-init training deck and data that bench/speed_gpu.sh, bench/run_bench.sh and
# bench/fp8_bench.sh train on; source it (`. "$root/bench/lib/deck.sh"`), it runs nothing by itself.
#
# deck_vocab PRESET: prints the preset's vocabulary size (152064 for qwen2.5-7b and qwen2.5-14b, else 151936)
#
# deck_data QWENFT H5 ROWS SEQ VOCAB: ROWS random documents of SEQ tokens (bench/make_data.py, written to d.jsonl
#   beside H5) packed into H5 by `QWENFT prepare`
#
# deck_write FILE PRESET SEQ MICRO STEPS DATA PRECISION [KEY=VALUE ...] [-- LINE ...]: a deck for a model of PRESET
#   (model.init_seed = 1 unless init=N) on DATA (data.train) at seq_len SEQ, micro batch MICRO, no gradient accumulation, STEPS
#   steps, gradient clipping 1.0, AdamW (weight decay 0.01), peak_tflops 989 (H200 bf16 dense), written to FILE.
#   PRECISION: bf16; fp8:RECIPE (bf16 plus fp8 = { enabled = true; recipe = RECIPE; }); fp8:RECIPE:N (the same with
#   amax_history_len = N); fp8:RECIPE:N:save (and save_inputs = true); fp8:none (bf16 with an empty line where the fp8 line stands: fp8_bench.sh's baseline, so
#   that its bf16 and fp8 decks differ in that line only).
#   KEY=VALUE (default):
#     ckpt=DIR, log=DIR  checkpoint.dir (no checkpoints are written) and log.dir: required
#     ackpt=PLAN         activation_checkpointing (none): quoted, except true and false
#     shuffle=BOOL       data.shuffle (false); seed=N adds data.seed
#     init=N             model.init_seed (1): another random init with the same data order
#     lr=LR              AdamW's lr (1e-5); betas="B1, B2" adds AdamW's betas
#     warmup=N           adds WarmupDecayLR: 0 to lr over N steps (linear), decaying to 0 at STEPS
#     stage=N            zero_optimization.stage (0); overlap=BOOL adds zero_optimization.overlap_comm
#     eval=N             adds eval.every_steps
#     print=N            log.steps_per_print (1)
#   Each LINE after -- is written as one more line at the end (an empty one as an empty line).
#   Bad arguments: a message on stderr, return 2, FILE not written.

deck_vocab() {
  case $1 in qwen2.5-7b | qwen2.5-14b) echo 152064 ;; *) echo 151936 ;; esac
}

deck_data() {
  local q=$1 h5=$2 rows=$3 seq=$4 vocab=$5
  local jsonl
  jsonl=$(dirname "$h5")/d.jsonl
  python3 "$(dirname "${BASH_SOURCE[0]}")/../make_data.py" "$jsonl" "$rows" "$seq" "$vocab"
  "$q" prepare --in "$jsonl" --out "$h5" --vocab-size "$vocab" > /dev/null
}

deck_write() {
  if [ $# -lt 7 ]; then
    echo "deck_write: usage: deck_write FILE PRESET SEQ MICRO STEPS DATA PRECISION [KEY=VALUE ...] [-- LINE ...]" >&2
    return 2
  fi
  local file=$1 preset=$2 seq=$3 micro=$4 steps=$5 data=$6 precision=$7
  shift 7
  local ckpt="" log="" ackpt=none shuffle=false seed="" init=1 lr=1e-5 betas="" warmup="" stage=0 overlap="" eval="" print=1
  while [ $# -gt 0 ] && [ "$1" != -- ]; do
    case $1 in
      ckpt=* | log=* | ackpt=* | shuffle=* | seed=* | init=* | lr=* | betas=* | warmup=* | stage=* | overlap=* | eval=* | print=*)
        printf -v "${1%%=*}" %s "${1#*=}" ;;
      *) echo "deck_write: $file: unknown argument '$1' (KEY=VALUE with KEY one of ckpt log ackpt shuffle seed init lr" \
        "betas warmup stage overlap eval print, or -- then lines)" >&2; return 2 ;;
    esac
    shift
  done
  [ $# -gt 0 ] && shift # the --
  if [ -z "$ckpt" ] || [ -z "$log" ]; then
    echo "deck_write: $file: ckpt=DIR and log=DIR are required" >&2
    return 2
  fi
  local fp8line=""
  case $precision in
    bf16) ;;
    fp8:none) fp8line=$'\n' ;;
    fp8:?*:?*) local rh=${precision#fp8:} sv=""
      [ "${rh%:save}" != "$rh" ] && { sv=" save_inputs = true;"; rh=${rh%:save}; }
      fp8line="fp8 = { enabled = true; recipe = \"${rh%%:*}\"; amax_history_len = ${rh#*:};$sv };"$'\n' ;;
    fp8:?*) fp8line="fp8 = { enabled = true; recipe = \"${precision#fp8:}\"; };"$'\n' ;;
    *) echo "deck_write: $file: precision '$precision' is not bf16, fp8:RECIPE[:N] or fp8:none" >&2; return 2 ;;
  esac
  local ack="\"$ackpt\""
  case $ackpt in true | false) ack=$ackpt ;; esac
  {
    printf 'model = { preset = "%s"; init_seed = %s; };\n' "$preset" "$init"
    printf 'data = { train = "%s"; seq_len = %s; shuffle = %s;%s };\n' "$data" "$seq" "$shuffle" "${seed:+ seed = $seed;}"
    printf 'train_micro_batch_size_per_gpu = %s; gradient_accumulation_steps = 1;\n' "$micro"
    printf 'max_steps = %s; gradient_clipping = 1.0;\n' "$steps"
    printf 'activation_checkpointing = %s;\n' "$ack"
    printf 'optimizer = { type = "AdamW"; params = { lr = %s;%s weight_decay = 0.01; }; };\n' "$lr" \
      "${betas:+ betas = [$betas];}"
    if [ -n "$warmup" ]; then
      printf 'scheduler = { type = "WarmupDecayLR"; params = { warmup_min_lr = 0; warmup_max_lr = %s; warmup_num_steps = %s;\n' \
        "$lr" "$warmup"
      printf '              warmup_type = "linear"; total_num_steps = %s; }; };\n' "$steps"
    fi
    printf 'bf16 = { enabled = true; };\n%s' "$fp8line"
    printf 'zero_optimization = { stage = %s;%s };\n' "$stage" "${overlap:+ overlap_comm = $overlap;}"
    if [ -n "$eval" ]; then printf 'eval = { every_steps = %s; };\n' "$eval"; fi
    printf 'checkpoint = { dir = "%s"; every_steps = 0; keep = 1; at_end = false; };\n' "$ckpt"
    printf 'log = { dir = "%s"; steps_per_print = %s; };\n' "$log" "$print"
    printf 'peak_tflops = 989;\n'
    if [ $# -gt 0 ]; then printf '%s\n' "$@"; fi
  } > "$file"
}
