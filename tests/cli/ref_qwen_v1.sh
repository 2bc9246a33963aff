#!/usr/bin/env bash
# HF transformers golden "qwen_v1": import -> prepare -> eval -> train 5 steps -> eval, to 2e-4 (tests/reference/).
exec bash "$SRC/tests/reference/run_case.sh" qwen_v1
