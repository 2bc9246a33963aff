#!/usr/bin/env bash
# HF transformers golden "qwen3_qknorm": import -> prepare -> eval -> train 5 steps -> eval, to 2e-4 (tests/reference/).
exec bash "$SRC/tests/reference/run_case.sh" qwen3_qknorm
