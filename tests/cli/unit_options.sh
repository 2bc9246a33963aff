#!/usr/bin/env bash
# The option layer (src/cli/options.c) through the real binary: every command explains itself (--help and `help CMD`
# give the same text, listing the command's options), takes GNU syntax (--opt=value = --opt value), and refuses a
# bad option or value with exit 2 and a message naming it, before MPI starts; under mpirun --help and errors print
# once; --version names the source, the build type and the CUDA state; --man is a man page and --completion bash a
# completion script that bash accepts.
set -uo pipefail
rm -rf "$WORK"; mkdir -p "$WORK"; cd "$WORK"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
expect2() { # expect2 PATTERN ARGS...: exit 2, PATTERN in stderr, nothing on stdout
  local pat=$1 rc=0; shift
  "$QWENFT" "$@" > out.txt 2> err.txt || rc=$?
  if [ "$rc" -ne 2 ] || ! grep -qF -- "$pat" err.txt || [ -s out.txt ]; then
    fail "qwen-ft $*: exit $rc, stderr: $(cat err.txt)"
  else echo "exit 2: qwen-ft $* -> $(head -n 1 err.txt)"; fi
}

# 1. every command qwen-ft --help lists: --help = help CMD, exit 0, a usage line and --help itself; the commands
#    named here also list one option of their own
declare -A own=([train]=--set= [eval]=--set= [prepare]=--valid-fraction= [import]=--from= [export]=--dtype=
  [generate]=--max-new-tokens= [estimate]=--ranks-per-node= [report]=--json [plot]=--keys=)
cmds=$("$QWENFT" --help | sed -n '/^commands:/,/^$/s/^  \([a-z]*\) .*/\1/p')
[ "$(echo "$cmds" | wc -w)" -ge 9 ] || fail "qwen-ft --help lists only: $cmds"
for c in "${!own[@]}"; do echo "$cmds" | grep -qx "$c" || fail "qwen-ft --help does not list $c"; done
for c in $cmds; do
  "$QWENFT" "$c" --help > a.txt 2>&1 || fail "$c --help: exit $?"
  "$QWENFT" help "$c" > b.txt 2>&1 || fail "help $c: exit $?"
  cmp -s a.txt b.txt || fail "$c --help and help $c differ"
  grep -q "^usage: qwen-ft $c " a.txt && grep -qF -- "--help" a.txt && grep -qF -- "${own[$c]:---help}" a.txt ||
    fail "$c --help lacks the usage line or ${own[$c]:-}: $(head -n 3 a.txt)"
done
"$QWENFT" --help | grep -q "^  generate " || fail "qwen-ft --help does not list generate"

# 2. bad options and values: exit 2 naming them
expect2 "'--rnks' (did you mean --ranks?)" estimate x.cfg --rnks 4
expect2 "--max-new-tokens=0: expected an integer in [1, 16777216]" generate --model m --prompt-ids 1 --max-new-tokens=0
expect2 "--max-new-tokens=12x" generate --model m --prompt-ids 1 --max-new-tokens 12x
expect2 "--top-p=1.5: expected a number in (0, 1]" generate --model m --prompt-ids 1 --top-p 1.5
expect2 "--seed=-3" generate --model m --prompt-ids 1 --seed=-3
expect2 "--greedy takes no value" generate --model m --greedy=1
expect2 "--greedy contradicts --temperature" generate --model m --prompt-ids 1 --greedy --temperature 0.5
expect2 "missing --model=M (required)" generate --prompt-ids 1
expect2 "--dtype=bf15: expected one of bf16|fp16|fp32" export --from a --out b --dtype=bf15
expect2 "option --from needs a value" export --from
expect2 "--valid-fraction=1: expected a number in [0, 1)" prepare --in a.jsonl --out b.h5 --valid-fraction 1
expect2 "--ranks=0" estimate x.cfg --ranks=0
expect2 "--device=tpu" estimate x.cfg --device tpu
expect2 "missing DECK.cfg" train
expect2 "unexpected argument 'b.cfg' (one DECK.cfg only)" eval a.cfg b.cfg
expect2 "unexpected argument 'extra'" report extra
expect2 "unknown command 'trian' (did you mean train?)" trian
expect2 "unknown command 'nope'" help nope
expect2 "unknown option '-q'" plot m.jsonl -o x.svg -q

# 3. GNU syntax: --opt=value and --opt value, options before or after the deck, -- ends the options
cat > e.cfg <<'DECK'
model = { vocab_size = 320; hidden_size = 32; intermediate_size = 64; num_hidden_layers = 2; num_attention_heads = 4; };
data = { train = "t.h5"; seq_len = 32; };
train_batch_size = 16; train_micro_batch_size_per_gpu = 4; max_steps = 1;
DECK
"$QWENFT" estimate e.cfg --ranks=4 --device=gpu --set=zero_optimization.stage=2 > a.txt || fail "estimate --opt=value"
"$QWENFT" estimate --ranks 4 --device gpu --set zero_optimization.stage=2 -- e.cfg > b.txt || fail "estimate --opt value"
cmp -s a.txt b.txt || fail "--opt=value and --opt value differ"
grep -q "4 ranks" a.txt || fail "--ranks 4 not applied: $(head -n 1 a.txt)"
grep -qE '^2 +none .*\*$' a.txt || fail "--set zero_optimization.stage=2 not applied"

# 4. under mpirun: once
if [ -n "${MPIEXEC:-}" ]; then
  n=$("$MPIEXEC" -np 2 --oversubscribe "$QWENFT" train --help 2>&1 | grep -c "^usage: qwen-ft train")
  [ "$n" -eq 1 ] || fail "mpirun -np 2 train --help printed the usage $n times"
  n=$("$MPIEXEC" -np 2 --oversubscribe "$QWENFT" estimate e.cfg --rnks 2 2>&1 | grep -c "unknown option '--rnks'")
  [ "$n" -eq 1 ] || fail "mpirun -np 2 with a bad option printed it $n times"
fi

# 5. --version, --man, --completion bash
"$QWENFT" --version > v.txt || fail "--version: exit $?"
head -n 1 v.txt | grep -qE '^qwen-ft [0-9]+\.[0-9]+\.[0-9]+$' || fail "--version line 1: $(head -n 1 v.txt)"
sed -n 2p v.txt | grep -qE '^source .+, [A-Za-z]+ build, CUDA backend (off|on \(architectures .+\))$' ||
  fail "--version line 2: $(sed -n 2p v.txt)"
"$QWENFT" --man > qwen-ft.1 || fail "--man: exit $?"
grep -q '^\.TH QWEN\\-FT 1' qwen-ft.1 && grep -q '^\.SS "qwen\\-ft generate' qwen-ft.1 &&
  grep -q 'max\\-new\\-tokens' qwen-ft.1 || fail "--man: not a man page with every command"
if command -v groff > /dev/null; then
  groff -man -Tutf8 -ww -z qwen-ft.1 2> groff.err; [ -s groff.err ] && fail "groff warns: $(head -n 3 groff.err)"
fi
"$QWENFT" --completion bash > qwen-ft.bash || fail "--completion bash: exit $?"
got=$(bash -c 'source ./qwen-ft.bash; COMP_WORDS=(qwen-ft generate --max); COMP_CWORD=2; _qwen_ft; echo "${COMPREPLY[*]}"')
[ "$got" = "--max-new-tokens" ] || fail "completion of 'generate --max': '$got'"
got=$(bash -c 'source ./qwen-ft.bash; COMP_WORDS=(qwen-ft export --dtype ""); COMP_CWORD=3; _qwen_ft; echo "${COMPREPLY[*]}"')
[ "$got" = "bf16 fp16 fp32" ] || fail "completion of 'export --dtype ': '$got'"
expect2 "--completion takes one shell: bash" --completion zsh

[ "$fails" -eq 0 ] && echo "unit_options: all checks passed" || { echo "unit_options: $fails failure(s)"; exit 1; }
