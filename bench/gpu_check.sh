#!/usr/bin/env bash
# The GPU check (bench/gpu_check.py): CUDA tests, the Triton point ops' settings, the attention kernels per
# preset, the full network's training step, the published test of one room, PTv3's recipe step and test, the
# experimental kernels' comparisons (norm, relation_backward), and optionally one demo epoch, its evaluation and
# predict; writes bench/results/gpu.json (and copies under $OUT).
# Everything takes longer than one 10-minute device call (296 s in run 4 before PTv3's steps, published_bf16,
# norm, graphs, loader and relation_backward, whose limits add 110 + 60 + 45 + 40 + 100 + 80 + 60 + 90 s), so run it as two calls back to
# back on the warm machine (docs/gpu.md):
#   bench/gpu_check.sh --no-norm --no-graphs --no-loader --no-relation-backward   # at most about 9 minutes
#   bench/gpu_check.sh --no-tests --no-check --no-hierarchy --no-bench --no-published --no-ptv3 \
#       --out bench/results/gpu_kernels.json                                 # norm, graphs, loader, relation_backward: ~6 min
#   bench/gpu_check.sh --train --evaluate    # also synth tiny -> prepare -> train.py 1 epoch -> evaluate
#   PYTHON=python3.12 bench/gpu_check.sh ... # the interpreter (default python3); no install needed
# Wheels in .whl/ (bench/gpu_wheels.sh) are installed first, into /tmp/pointgeope_site, without an index.
set -u
cd "$(dirname "$0")/.."
if compgen -G ".whl/*.whl" >/dev/null; then
    "${PYTHON:-python3}" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/pointgeope_site .whl/*.whl && export PYTHONPATH="/tmp/pointgeope_site${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python3}" bench/gpu_check.py "$@"
