#!/usr/bin/env bash
# Install torch into the environment of PYTHON (make setup, make test-nn-minimal):
#   bash .ci/install_torch.sh PYTHON TORCH_SPEC TORCH_INDEX [pip options...]
# The Makefile owns TORCH_SPEC (torch==2.13.0) and TORCH_INDEX (pytorch.org's CPU index); this script has no
# defaults of its own. In order:
#   1. a wheel already at hand (pip's find-links, e.g. a local folder of wheels), without the network: the
#      one pip call with --no-index --no-deps, then torch's dependencies from the usual indexes;
#   2. otherwise from TORCH_INDEX, which serves torch's dependencies too. On PyPI a Linux torch wheel is the
#      CUDA build (several GB of nvidia-* packages); pytorch.org's https://download.pytorch.org/whl/cpu holds
#      the CPU one. An empty TORCH_INDEX asks the usual indexes (PyPI's default build).
set -euo pipefail
if [ $# -lt 3 ]; then
    echo "usage: bash .ci/install_torch.sh PYTHON TORCH_SPEC TORCH_INDEX [pip options...]" >&2
    exit 2
fi
PY=$1
SPEC=$2
INDEX=$3
shift 3
if "$PY" -m pip install "$@" --no-index --no-deps "$SPEC" > /dev/null 2>&1; then
    echo "torch: $SPEC from a wheel at hand (pip's find-links); now its dependencies"
    "$PY" -m pip install "$@" "$SPEC"
elif [ -n "$INDEX" ]; then
    echo "torch: no wheel of $SPEC at hand; installing it from $INDEX"
    "$PY" -m pip install "$@" "$SPEC" --index-url "$INDEX"
else
    echo "torch: no wheel of $SPEC at hand; installing it from the usual indexes (TORCH_INDEX is empty)"
    "$PY" -m pip install "$@" "$SPEC"
fi
