#!/usr/bin/env bash
# bench/auto_grid.sh PART... — the [auto] issue's targets on the GPU machine: for a model, seq_len and
# gpu_memory_limit_gb, a run with every layout key "auto" against a reduced hand grid — the layouts `qwen-ft plan`
# ranks top-5 and the obvious hand choices (ZeRO-3 + full offload + full recomputation, micro 1: the seed's layout;
# ZeRO-2 + optimizer offload + full recomputation, micro 1; stage 0 without offload, selective recomputation,
# micro 1) — each for a few steps; tokens/s (the median of the steps after the second) and the GPU peak per run go to
# $OUT/auto_grid.jsonl, and a line per part says auto's ratio to the best measured run and its plan time
# ($OUT/auto_grid_summary.txt); every run's log and each part's plan go into $OUT/auto_grid-logs.tar as they come.
#   PART = model:seq:cap, e.g. 7b:4096:24 (cap 0 = no limit); models 1.5b 3b 7b (Qwen2.5); "all" lists every part.
#   One part is 6-9 runs of 5 steps (a few minutes): give a device call one to three parts, e.g.
#     bash bench/auto_grid.sh 1.5b:512:24 1.5b:512:48 1.5b:512:0
#   A plan of the top 5 (TOP=N: the top N, 1-5; a 7B part under a cap runs for minutes a layout, so TOP=3 keeps a
#   part inside one device call) with the layout auto's run resolved to is not run again (its row: auto's figure,
#   "same_as");
#   a run other than auto's stops (SIGKILL: no checkpoint) after TLIMIT s (default 150), or once the median of its
#   steps after the second is below half the part's best so far (its row: those steps, "stopped" saying why).
#   HAND=0 leaves the three hand layouts out (a part whose hand runs are recorded already: the call's time goes to
#   the plans and REPEAT).
#   REPEAT=N (default 0): N more rounds of two runs, auto's layout then the part's best other layout, and the summary
#   adds the ratio of their means (the offloaded 7B runs vary from call to call by up to 10%).
#   The calibration cache is shared by the runs of a machine ($OUT/plan-cache): the first plan of a model and
#   seq_len measures, the rest read it. tiny:64:0 runs a small explicit model (CPU ranks: a smoke test of the script).
# Run from the repo root after `. .devdeps/env.sh`, with QWENFT set to the CUDA build's binary.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
Q=${QWENFT:-$root/build/qwen-ft}
. "$root/bench/random_model.sh"
out=${OUT:-/tmp}
steps=${STEPS:-5}
top=${TOP:-5}
[[ "$top" =~ ^[1-5]$ ]] || { echo "bench/auto_grid.sh: TOP=$top: 1 to 5 expected" >&2; exit 2; }
work=$(mktemp -d)
cache="$out/plan-cache"
mkdir -p "$cache"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ "${1:-}" = all ]; then
  for m in 1.5b 3b 7b; do for s in 512 4096; do for c in 24 48 0; do echo "$m:$s:$c"; done; done; done
  exit 0
fi
[ $# -ge 1 ] || { echo "usage: bench/auto_grid.sh model:seq:cap ... | all" >&2; exit 2; }

# the GPU's memory in use (MiB; 0 without nvidia-smi), and what it was before the first run
gpu_used_mib() {
  local v; v=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits 2> /dev/null | head -1)
  [[ "$v" =~ ^[0-9]+$ ]] && echo "$v" || echo 0
}
gpu_base_mib=$(gpu_used_mib)

# keep FILE NAME: FILE appended to $OUT/auto_grid-logs.tar as NAME, at once (the device machine returns at most 8
# files of a call, and a call cut off by its time limit returns what is there: so few files, each written as it comes)
keep() {
  mkdir -p "$work/keep" && cp "$1" "$work/keep/$2" && tar -rf "$out/auto_grid-logs.tar" -C "$work/keep" "$2" && rm -f "$work/keep/$2"
}

# run NAME PART KIND [--set ...]: one training run; one JSON line
run_one() {
  local name=$1 part=$2 kind=$3; shift 3
  rm -rf "${work:?}/$name"; mkdir -p "$work/$name/ck"
  cp "$cache/qwenft-plan-rates.json" "$work/$name/ck/" 2>/dev/null || true
  local t0; t0=$(date +%s.%N)
  mpirun -np 1 --bind-to none -x NCCL_NVLS_ENABLE -x QWENFT_BACKEND "$Q" train "$work/deck.cfg" \
    --set checkpoint.dir="$work/$name/ck" --set log.dir="$work/$name/log" "$@" > "$work/$name.out" 2>&1 &
  local pid=$! stopped="" start=$SECONDS
  # the watchdog: SIGKILL, not SIGTERM (a SIGTERM makes qwen-ft write a checkpoint before it stops: tens of GB of
  # a 3B or 7B run's optimizer state onto the device's disk for nothing); a run other than auto's stops once its
  # steps after the second are measured and below half the part's best so far (its figure is then those steps)
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if [ $((SECONDS - start)) -ge "${TLIMIT:-150}" ]; then
      stopped="time limit ${TLIMIT:-150} s"
    elif [ "$kind" != auto ] && [ -n "$best" ] && python3 - "$work/$name/log/metrics.jsonl" "$best" <<'PY'
import json, sys
try: t = [json.loads(l)["tokens_per_s"] for l in open(sys.argv[1]) if '"loss"' in l][2:]
except (OSError, ValueError, KeyError): t = []
sys.exit(0 if t and sorted(t)[len(t) // 2] < 0.5 * float(sys.argv[2]) else 1)
PY
    then
      stopped="below half the best so far ($best tok/s)"
    fi
    if [ -n "$stopped" ]; then
      pkill -KILL -f -- "checkpoint.dir=$work/$name/ck" 2>/dev/null
      echo "bench/auto_grid.sh: $name stopped: $stopped" >> "$work/$name.out"
      break
    fi
  done
  { wait "$pid"; } 2>/dev/null # (bash would report the SIGKILL)
  local rc=$?
  # a killed run's rank may outlive mpirun by seconds, and the driver frees its GPU memory after that: the next run
  # waits (at most 60 s) until no process of this run is left and the GPU holds at most 1 GiB more than before the
  # first run (session 12: a run started right after a killed 36 GiB run failed its 30 GB allocation with 91 of
  # 139 GiB held)
  local w=0
  while [ $w -lt 60 ] && { pgrep -f -- "checkpoint.dir=$work/$name/ck" > /dev/null ||
    [ "$(gpu_used_mib)" -gt $((gpu_base_mib + 1024)) ]; }; do
    sleep 1; w=$((w + 1))
  done
  [ $w -gt 0 ] && echo "bench/auto_grid.sh: waited $w s for $name's processes and GPU memory to go" >> "$work/$name.out"
  keep "$work/$name.out" "auto_grid-${part//:/_}-$name.log"
  [ -s "$work/$name/ck/qwenft-plan-rates.json" ] && cp "$work/$name/ck/qwenft-plan-rates.json" "$cache/" 2>/dev/null
  python3 - "$work/$name/log/metrics.jsonl" "$work/$name.out" "$part" "$kind" "$rc" "$*" "$t0" "$stopped" <<'PY' | tee -a "$out/auto_grid.jsonl" "$work/last.json"
import json, re, sys
path, log, part, kind, rc, sets, t0, stopped = sys.argv[1:9]
try:
    steps = [json.loads(l) for l in open(path) if '"loss"' in l]
except OSError:
    steps = []
text = open(log, errors="replace").read()
rest = steps[2:] or steps
t = sorted(s["tokens_per_s"] for s in rest)
mid = t[len(t) // 2] if t else None
plan = re.search(r'layout plan \("auto"\): (.*?); predicted .*?, ([0-9]+) tokens/s', text)
deck = text.split("---- resolved deck ----")[-1] if "---- resolved deck ----" in text else ""
g = lambda k: (re.search(rf"\n\s*{k} = ([^;]+);", deck) or [None, None])[1]
layout = dict(stage=g("stage"), micro=g("train_micro_batch_size_per_gpu"), accum=g("gradient_accumulation_steps"),
              ackpt=g("activation_checkpointing"), recompute_layers=g("recompute_layers"), ratio=g("ratio"))
off = re.findall(r'device = "([a-z]+)"', deck)
layout["offload"] = off
row = dict(part=part, kind=kind, rc=int(rc), steps=len(steps), tok_s=round(mid) if mid else None,
           peak_gpu_gib=max((x.get("peak_gpu_mem_gib") or 0 for x in steps), default=None), layout=layout, sets=sets,
           plan=plan.group(1) if plan else None, predicted_tok_s=int(plan.group(2)) if plan else None,
           oom="out of memory" in text.lower() or "cannot allocate" in text.lower())
adamw = sorted(s["host_adamw_s"] for s in rest if "host_adamw_s" in s)  # offloaded runs: the host AdamW as it ran
if adamw:
    row["host_adamw_s"] = round(adamw[len(adamw) // 2], 3)
if stopped:
    row["stopped"] = stopped
print(json.dumps(row))
PY
  local tok; tok=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("tok_s") or 0)' "$work/last.json")
  rm -f "$work/last.json"
  [ "$tok" -gt "${best:-0}" ] && best=$tok
}

for part in "$@"; do
  IFS=: read -r m seq cap <<<"$part"
  best="" # the part's best tok/s so far (run_one)
  bench_random_model "$m"
  tb=$([ "$seq" -ge 4096 ] && echo 8 || echo 32)
  bench_random_data "$work" $((tb * (steps + 1))) "$seq"
  cat > "$work/deck.cfg" <<DECK
$model
data = { train = "$work/d.h5"; seq_len = $seq; shuffle = false; };
train_batch_size = $tb; train_micro_batch_size_per_gpu = "auto";
max_steps = $steps; gradient_clipping = 1.0;
activation_checkpointing = "auto";
optimizer = { type = "AdamW"; params = { lr = 1e-5; weight_decay = 0.01; }; };
bf16 = { enabled = true; };
zero_optimization = { stage = "auto"; overlap_comm = true;
                      offload_optimizer = { device = "auto"; pin_memory = true; };
                      offload_param = { device = "auto"; pin_memory = true; }; };
gpu_memory_limit_gb = $cap;
checkpoint = { every_steps = 0; at_end = false; };
log = { steps_per_print = 1; };
eval = { every_steps = 0; };
DECK
  # the plan (and its time: calibration included when the cache has no rates for this shape)
  t0=$(date +%s.%N)
  "$Q" plan "$work/deck.cfg" --cache "$cache" --top "$top" --json > "$work/plan.json" 2> "$work/plan.err"
  prc=$?
  plan_s=$(python3 -c "import time,sys; print(round(time.time() - float(sys.argv[1]), 2))" "$t0")
  keep "$work/plan.json" "auto_grid-${part//:/_}-plan.json"
  echo "{\"part\": \"$part\", \"kind\": \"plan\", \"rc\": $prc, \"plan_s\": $plan_s}" | tee -a "$out/auto_grid.jsonl"
  run_one auto "$part" auto
  # the planner's top 5 as hand runs (the layouts pinned by --set); a plan with the layout auto's run resolved to
  # is not run again: its row is auto's figure, marked "same_as": "auto"
  python3 - "$work/plan.json" "$out/auto_grid.jsonl" "$part" "$top" > "$work/top.txt" <<'PY'
import json, sys
try: p = json.load(open(sys.argv[1]))
except Exception: sys.exit(0)
auto = [r for r in (json.loads(l) for l in open(sys.argv[2]) if l.strip())
        if r.get("part") == sys.argv[3] and r["kind"] == "auto"][-1:]
def layout(q):
    off = q["offload"]
    return dict(stage=str(q["stage"]), micro=str(q["micro_batch"]), ackpt='"%s"' % q["activation_checkpointing"],
                recompute_layers=str(q["recompute_layers"] if q["activation_checkpointing"] != "none" else -1),
                offload=["cpu" if off != "none" else "none", "cpu" if off == "optimizer+param" else "none"],
                ratio=float(q["ratio"]) if off != "none" else None)
def same(a, q):
    a = dict(a, ratio=float(a["ratio"]) if a.get("ratio") and a["offload"][0] != "none" else None)
    b = layout(q)
    return all(a.get(k) == b[k] for k in b)
for q in p.get("plans", [])[:int(sys.argv[4])]:
    if not q["fits"]: continue
    if auto and auto[0].get("tok_s") and same(auto[0]["layout"], q):
        print("same_as_auto")
        continue
    off = q["offload"]
    sets = [f"zero_optimization.stage={q['stage']}",
            f"zero_optimization.offload_optimizer.device={'cpu' if off != 'none' else 'none'}",
            f"zero_optimization.offload_param.device={'cpu' if off == 'optimizer+param' else 'none'}",
            f"zero_optimization.offload_optimizer.ratio={q['ratio'] if off != 'none' else 1}",
            f"train_micro_batch_size_per_gpu={q['micro_batch']}",
            f"activation_checkpointing={q['activation_checkpointing']}"]
    if q["activation_checkpointing"] != "none":
        sets.append(f"recompute_layers={q['recompute_layers']}")
    print(" ".join("--set " + s for s in sets))
PY
  k=0
  while read -r line; do
    k=$((k + 1))
    if [ "$line" = same_as_auto ]; then
      python3 - "$out/auto_grid.jsonl" "$part" "$k" <<'PY' | tee -a "$out/auto_grid.jsonl"
import json, sys
a = [r for r in (json.loads(l) for l in open(sys.argv[1]) if l.strip()) if r.get("part") == sys.argv[2] and r["kind"] == "auto"][-1]
print(json.dumps(dict(a, kind="plan#" + sys.argv[3], same_as="auto")))
PY
      continue
    fi
    # shellcheck disable=SC2086
    run_one "top$k" "$part" "plan#$k" $line < /dev/null # mpirun reads stdin
  done < "$work/top.txt"
  hands=("3 cpu cpu full" "2 cpu none full" "0 none none selective")
  [ "${HAND:-1}" = 0 ] && hands=()
  for hand in "${hands[@]}"; do
    read -r st oo op ak <<<"$hand"
    run_one "hand_s${st}_${oo}_${op}_${ak}" "$part" "hand" --set zero_optimization.stage="$st" \
      --set zero_optimization.offload_optimizer.device="$oo" --set zero_optimization.offload_param.device="$op" \
      --set zero_optimization.offload_optimizer.ratio=1 --set train_micro_batch_size_per_gpu=1 \
      --set activation_checkpointing="$ak"
  done
  # REPEAT rounds: auto's layout and the grid's best other layout again, in turn (the offloaded runs vary from call to
  # call by more than the plans differ: session 21's 7b:512:0 measured the two in the opposite order in the next call)
  bsets=$(python3 - "$out/auto_grid.jsonl" "$part" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
runs = [r for r in rows if r.get("part") == sys.argv[2] and r["kind"] not in ("plan", "auto") and r.get("tok_s")
        and not r.get("same_as") and "#r" not in r["kind"]]
b = max(runs, key=lambda r: r["tok_s"], default=None)
print(b["sets"] if b else "")
PY
)
  if [ -n "$bsets" ]; then
    for r in $(seq "${REPEAT:-0}"); do
      run_one "auto_r$r" "$part" "auto#r$r"
      # shellcheck disable=SC2086
      run_one "best_r$r" "$part" "best#r$r" $bsets < /dev/null
    done
  fi
  python3 - "$out/auto_grid.jsonl" "$part" <<'PY' | tee -a "$out/auto_grid_summary.txt"
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
rows = [r for r in rows if r.get("part") == sys.argv[2]]
plan = [r for r in rows if r["kind"] == "plan"][-1:]
auto = [r for r in rows if r["kind"] == "auto"][-1:]
runs = [r for r in rows if r["kind"] != "plan" and r.get("tok_s") and "#r" not in r["kind"]]
best = max(runs, key=lambda r: r["tok_s"], default=None)
a = auto[0] if auto else None
ratio = a["tok_s"] / best["tok_s"] if a and a.get("tok_s") and best else 0
line = (f"{sys.argv[2]}: auto {a['tok_s'] if a else None} tok/s ({a['plan'] if a else '?'}; predicted "
        f"{a['predicted_tok_s'] if a else '?'}; peak {a['peak_gpu_gib'] if a else '?'} GiB; rc {a['rc'] if a else '?'}), "
        f"best {best['tok_s'] if best else None} ({best['kind'] if best else '-'}: {best['sets'] if best else ''}), "
        f"ratio {ratio:.3f} {'ok' if ratio >= 0.9 else 'BELOW 0.9'}; plan {plan[0]['plan_s'] if plan else '?'} s; "
        f"OOM runs {sum(1 for r in rows if r.get('oom'))}")
# with REPEAT: every run of auto's layout against every run of the best other layout (its --set line), as means
other = max((r for r in runs if r["kind"] != "auto" and not r.get("same_as")), key=lambda r: r["tok_s"], default=None)
ra = [r["tok_s"] for r in rows if r["kind"].split("#r")[0] == "auto" and r.get("tok_s")]
rb = [r["tok_s"] for r in rows if other and r.get("tok_s") and r["sets"] == other["sets"]
      and r["kind"].split("#r")[0] != "auto" and not r.get("same_as")]
if other and len(ra) > 1 and rb:
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    line += (f"; repeated: auto's layout {ra} (mean {ma:.0f}), the best other layout's {rb} (mean {mb:.0f}), "
             f"ratio of the means {min(1.0, ma / mb):.3f} {'ok' if ma / mb >= 0.9 else 'BELOW 0.9'}")
print(line)
PY
done
rm -rf "$work"
