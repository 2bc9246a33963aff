#!/usr/bin/env bash
# checkpoint.export_hf = true (src/store/export_sharded.c): every checkpoint also writes checkpoint.dir/step-N-hf from the
# ZeRO shards, each rank writing its own part of every tensor with MPI-IO. On 1 rank (stage 0), 2 ranks (stage 3)
# and 3 ranks (stage 2, optimizer offload) every tensor of every HF directory equals, byte for byte, what
# `qwen-ft export --from step-N.h5` writes from that checkpoint; config.json and generation_config.json are
# written; HF directories of checkpoints that checkpoint.keep pruned are removed with them.
# Env: QWENFT, WORK, SRC (tests/mpi_common.sh).
source "$SRC/tests/mpi_common.sh"
common=(--set checkpoint.export_hf=true --set checkpoint.every_steps=2 --set checkpoint.keep=2)
run s0 1 "${common[@]}" --set zero_optimization.stage=0 || exit 1
run s3 2 "${common[@]}" --set zero_optimization.stage=3 || exit 1
run s2 3 "${common[@]}" --set zero_optimization.stage=2 --set zero_optimization.offload_optimizer.device=cpu || exit 1
for r in s0 s2 s3; do
  grep -q "checkpoint: $r/ck/step-00000005-hf (HF, .*from their shards" $r.out || { echo "FAIL: $r: no HF line"; grep checkpoint $r.out; exit 1; }
  hfs=$(cd $r/ck && ls -d step-*-hf | tr '\n' ' ')
  [ "$hfs" = "step-00000004-hf step-00000005-hf " ] || { echo "FAIL: $r: HF directories '$hfs' (keep = 2: steps 4 and 5)"; exit 1; }
  for s in 00000004 00000005; do
    "$QWENFT" export --from $r/ck/step-$s.h5 --out $r/ref-$s > /dev/null
    python3 - $r/ck/step-$s-hf $r/ref-$s <<'PY' || exit 1
import json, os, struct, sys
def tensors(d):
    out = {}
    for f in sorted(os.listdir(d)):
        if not f.endswith(".safetensors"): continue
        b = open(f"{d}/{f}", "rb").read(); n = struct.unpack("<Q", b[:8])[0]; h = json.loads(b[8:8 + n])
        for k, v in h.items():
            if k != "__metadata__":
                out[k] = (v["dtype"], v["shape"], b[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]])
    return out
a, b = tensors(sys.argv[1]), tensors(sys.argv[2])
if a.keys() != b.keys() or any(a[k] != b[k] for k in a):
    print(f"FAIL {sys.argv[1]}: tensors differ from {sys.argv[2]}: {[k for k in a if a.get(k) != b.get(k)][:5]}"); sys.exit(1)
for f in ("config.json", "generation_config.json"):
    if json.load(open(f"{sys.argv[1]}/{f}")) != json.load(open(f"{sys.argv[2]}/{f}")): print(f"FAIL {f} differs"); sys.exit(1)
PY
  done
  echo "$r: step-4/5-hf == qwen-ft export of the checkpoint ($(grep -o 'step-00000005-hf (HF[^)]*)' $r.out))"
done
echo PASS
