#!/usr/bin/env bash
# tests/cli/mpi_plan_fallback.sh on the CUDA backend (1 GPU, or 2 ranks on 2 GPUs over NCCL): a layout plan that
# runs out of GPU memory in its set-up (the test hook QWENFT_INJECT_FAULT=R:K:oom, refused through the CUDA
# backend's own allocator) falls back by itself; the backend's byte count must return to its value before the
# set-up, else the run refuses to fall back and the test fails; the losses match the hand-set run of the plan that
# ran within 1e-6 relative (the fp32 tables). Skipped without a GPU.
set -euo pipefail
ngpu=$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU' || true)
if [ "${ngpu:-0}" -lt 1 ]; then echo "no GPU ($ngpu): skipped"; exit 77; fi
export QWENFT_BACKEND=cuda
PLAN_FALLBACK_NP=1
if [ "$ngpu" -ge 2 ]; then PLAN_FALLBACK_NP=2; fi
export PLAN_FALLBACK_NP PLAN_FALLBACK_TOL=${PLAN_FALLBACK_TOL:-1e-6}
exec bash "$SRC/tests/cli/mpi_plan_fallback.sh"
