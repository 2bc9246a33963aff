#!/usr/bin/env bash
# tests/cli/mpi_update_overlap.sh on the CUDA tables (1 GPU, or 2 ranks on 2 GPUs over NCCL): the AdamW on the
# side stream, overlapping the next forward, gives the trajectory and the checkpoints of the update completed inside
# the step bit for bit, on the fp32 table and on bf16. Skipped without a GPU.
set -euo pipefail
ngpu=$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU' || true)
if [ "${ngpu:-0}" -lt 1 ]; then echo "no GPU ($ngpu): skipped"; exit 77; fi
export QWENFT_BACKEND=cuda
UPDATE_OVERLAP_NP=1
if [ "$ngpu" -ge 2 ]; then UPDATE_OVERLAP_NP="1 2"; fi
export UPDATE_OVERLAP_NP
WORK0=${WORK:?}
WORK=$WORK0/fp32 UPDATE_OVERLAP_SETS="" bash "$SRC/tests/cli/mpi_update_overlap.sh"
WORK=$WORK0/bf16 UPDATE_OVERLAP_SETS="--set bf16.enabled=true" bash "$SRC/tests/cli/mpi_update_overlap.sh"
