#!/usr/bin/env bash
# The GPU check (bench/gpu_check.py): CUDA tests, the Triton point ops' settings, the attention kernels per
# preset, the full network's training step, the published test of one room, PTv3's recipe step and test, the
# experimental paths' comparisons (graphs, graphs16, norm, relation_backward), and optionally one demo epoch,
# its evaluation and predict; writes bench/results/gpu.json (and copies under $OUT).
# All the steps take longer than one device session (15 minutes with the machine's start; their limits add up
# to more than that: tests/bench/test_gpu_check.py sums them), so the steps run in the order of what they
# decide (gpu_check.py's plan: the tests and the kernel check, the compiles, then the paths whose measure
# decides a default: graphs, bench16, graphs16, norm_op, norm, relation_backward; then the targets measured
# before, the loader, PTv3) and a call records the steps its --budget leaves out as skipped. One call a session (docs/gpu.md):
#   PYTHON=python3 bash bench/gpu_check.sh --budget 480                     # the run tool's timeout 570 s
#   bench/gpu_check.sh --budget 480 --no-bench --no-published --no-norm --no-relation-backward --no-loader --no-hierarchy --no-ptv3 --graphs16-amps none bf16   # docs/gpu.md's next call
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
