#!/usr/bin/env bash
# The GPU check (bench/gpu_check.py): CUDA tests, the full network's bf16 training step per preset, and
# optionally one demo epoch and its evaluation; writes bench/results/gpu.json (and copies under $OUT).
#   bench/gpu_check.sh                       # tests + benchmark, about 4-6 minutes on one H100
#   bench/gpu_check.sh --train --evaluate    # also synth tiny -> prepare -> train.py 1 epoch -> evaluate
#   PYTHON=python3.12 bench/gpu_check.sh ... # the interpreter (default python3); no install needed
set -u
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python3}" bench/gpu_check.py "$@"
