#!/usr/bin/env bash
# HF transformers golden "qwen2_tied": import -> prepare -> eval -> train 5 steps -> eval, to 2e-4 (tests/reference/).
exec bash "$SRC/tests/reference/run_case.sh" qwen2_tied
