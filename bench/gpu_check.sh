#!/usr/bin/env bash
# The GPU check (bench/gpu_check.py): CUDA tests, the Triton point ops' settings, the attention kernels per
# preset, the full network's training step, the published test of one room, PTv3's recipe step and test, and
# optionally one demo epoch, its evaluation and predict; writes bench/results/gpu.json (and copies under $OUT).
#   bench/gpu_check.sh                       # all but the demo epoch, about 5 minutes (296 s on an H200)
#                                            # before PTv3's steps (an estimated minute more; --no-ptv3)
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
