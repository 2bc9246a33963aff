#!/usr/bin/env bash
# bench/offload_peer.sh STEPS SPEC ... — the DeepSpeed peer (.devdeps/bench/peer_deepspeed.py, staged by
# ../shared/bench/stage_deepspeed.sh) on one GPU with the specs of bench/offload_bench.sh
# (model:seq:micro:ackpt:offload:accum:prec), ZeRO-3, fewer steps than run_peer_ds.sh's 8 to fit one device call.
# One JSON line each into $OUT/offload.jsonl.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
here=$root/.devdeps/bench
steps=$1; shift
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/ds-site "$here"/../whl/*.whl || exit 1
export PYTHONPATH=/tmp/ds-site TORCH_CUDA_ARCH_LIST=9.0 PYTHONUNBUFFERED=1
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
for spec in "$@"; do
  IFS=: read -r m s b c off ga prec <<<"$spec"
  timeout "${TLIMIT:-300}" torchrun --standalone --nproc-per-node 1 "$here/peer_deepspeed.py" --model "$m" --seq "$s" \
    --mbs "$b" --ckpt "$c" --stage 3 --offload "$off" --accum "$ga" --fp16 "$([ "$prec" = fp16 ] && echo 1 || echo 0)" \
    --steps "$steps" 2>&1 | grep -E '^\{|Error' | tail -3 | sed "s|^{|{\"spec\": \"$spec\", |" | tee -a "${OUT:-/tmp}/offload.jsonl"
done
