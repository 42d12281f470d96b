#!/usr/bin/env bash
# Wheels of the CPU libraries that the GPU machines lack (pykdtree: the loader's and the host's kNN; they have
# numba, the CPU FPS), for Python 3.12 on x86-64 Linux, into .whl/ (ignored by git). Run it here, on a machine
# with a package index; bench/gpu_check.sh installs .whl/*.whl first where the folder travels with the tree.
#   bash bench/gpu_wheels.sh            # then carry .whl to the GPU machine
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl pykdtree
ls .whl
