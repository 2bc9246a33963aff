# shellcheck shell=bash
# bench/random_model.sh — sourced by the bench scripts that train a Qwen2.5 preset from random init on random
# tokens (auto_grid.sh, hgrad_accum.sh):
#   bench_random_model M   sets model (the deck's model group), vocab and eos (prepare's --eos-id, or empty) for
#                          M = 1.5b | 3b | 7b (Qwen2.5, random init) or tiny (a small explicit model: CPU ranks, a
#                          smoke test of the script); any other M: a message naming the caller, exit 2
#   bench_random_data DIR ROWS SEQ   ROWS random sequences of SEQ tokens, prepared into DIR/d.h5 (needs $Q, the
#                          qwen-ft binary, and $root, the repository)
# shellcheck disable=SC2034  # model, vocab, eos: read by the sourcing script
bench_random_model() {
  case "$1" in
    tiny) model='model = { arch = "qwen3"; vocab_size = 512; hidden_size = 128; intermediate_size = 256; num_hidden_layers = 4; num_attention_heads = 4; num_key_value_heads = 2; head_dim = 32; init_seed = 1; };'
          vocab=512; eos="--eos-id 511" ;;
    1.5b|3b|7b) model="model = { preset = \"qwen2.5-$1\"; init_seed = 1; };"
          vocab=$([ "$1" = 7b ] && echo 152064 || echo 151936); eos="" ;;
    *) echo "$(basename "$0"): unknown model $1 (1.5b, 3b, 7b, tiny)" >&2; exit 2 ;;
  esac
}
# shellcheck disable=SC2154  # root, Q: the sourcing script's
bench_random_data() {
  python3 "$root/bench/make_data.py" "$1/d.jsonl" "$2" "$3" "$vocab" || exit 1
  # shellcheck disable=SC2086
  "$Q" prepare --in "$1/d.jsonl" --out "$1/d.h5" --vocab-size "$vocab" $eos > /dev/null ||
    { echo "$(basename "$0"): prepare failed" >&2; exit 1; }
}
