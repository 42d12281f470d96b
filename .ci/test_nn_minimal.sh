#!/usr/bin/env bash
# pointgeope.nn installed as a PyG user installs it (make test-nn-minimal): a fresh virtual environment in
# build/nn-minimal/ (git-ignored; made anew each run, deleted when all passed: 1 GB) with make setup's torch
# (TORCH_SPEC, TORCH_INDEX: .ci/install_torch.sh) and `pip install ".[nn]"`, not editable: the package as pip
# builds it. Then, in that environment:
#   1. none of the toolkit's packages is installed (only torch-geometric, numba and what they pull);
#   2. tests/nn pass against the installed package (a copy of the tests outside the checkout, so that
#      `import pointgeope` cannot reach the source tree);
#   3. GeoPEPointTransformerConv(pe="geope") runs forward and backward;
#   4. `pointgeope info` prints, and a command that needs the toolkit says so in one line, exit code 2.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
# torch as make setup installs it; the Makefile owns both (make test-nn-minimal passes them)
TORCH_SPEC=${TORCH_SPEC:?expected TORCH_SPEC from the Makefile: run make test-nn-minimal}
TORCH_INDEX=${TORCH_INDEX?expected TORCH_INDEX from the Makefile: run make test-nn-minimal}
DIR=$(pwd)/${NN_MINIMAL_DIR:-build/nn-minimal}
PY=$DIR/venv/bin/python
start=$(date +%s)

rm -rf "$DIR"
# the project's files as a source distribution holds them, built from a copy: pip's in-tree build would leave
# setuptools' build/lib (which keeps deleted modules) and an egg-info in the checkout
mkdir -p "$DIR/src"
cp -r pyproject.toml README.md LICENSE pointgeope data_prep "$DIR/src/"
find "$DIR/src" -name __pycache__ -prune -exec rm -rf {} +
"$PYTHON" -m venv "$DIR/venv"
bash .ci/install_torch.sh "$PY" "$TORCH_SPEC" "$TORCH_INDEX" -q
"$PY" -m pip install -q "$DIR/src[nn]"
echo "nn-minimal: installed torch and .[nn] in $(( $(date +%s) - start )) s"

# 1. The toolkit's packages (pyproject.toml's toolkit extra) are not there; tqdm comes with torch-geometric.
"$PY" - <<'EOF'
import importlib.metadata as md

from pointgeope.extras import TOOLKIT_MODULES

toolkit = sorted(set(TOOLKIT_MODULES.values()) - {"torch-geometric", "numba", "tqdm"})   # what nn brings
present = []
for name in toolkit:
    try:
        present.append(f"{name} {md.version(name)}")
    except md.PackageNotFoundError:
        pass
assert not present, f'pip install ".[nn]" installed packages of the toolkit: {", ".join(present)}'
print(f"nn-minimal: {len(list(md.distributions()))} distributions, none of: {', '.join(toolkit)}; "
      f"torch {md.version('torch')}, torch-geometric {md.version('torch-geometric')}")
EOF
"$PY" -m pip install -q pytest

# 2. The nn tests, from a copy outside the checkout (pyproject.toml: pytest's settings).
RUN=$DIR/run
mkdir -p "$RUN/tests/fixtures"
cp pyproject.toml "$RUN/"
cp tests/__init__.py tests/conftest.py "$RUN/tests/"
cp tests/fixtures/geope_vectors.json "$RUN/tests/fixtures/"     # the one fixture of tests/nn (the spec's vectors)
# tests/nn/test_imports.py hides torch-geometric from a subprocess with test_extras.run_without (not collected here)
cp -r tests/test_extras.py tests/hidden_packages "$RUN/tests/"
cp -r tests/nn "$RUN/tests/"
cd "$RUN"
OMP_NUM_THREADS=1 "$PY" -m pytest -q -p no:cacheprovider tests/nn

# 3. The layer with standard GeoPE, forward and backward, from the installed package.
"$PY" - <<'EOF'
import sysconfig

import torch

import pointgeope
from pointgeope.model.ops import backends
from pointgeope.nn import GeoPEPointTransformerConv, knn_graph, target_frame

assert pointgeope.__file__.startswith(sysconfig.get_paths()["purelib"]), pointgeope.__file__
assert target_frame.frame_backend(torch.zeros(1, 3)) == "numba"        # the nn extra's one-pass CPU kernel
assert backends.knn_backend(torch.device("cpu")) == "numba"            # knn_graph's kd-tree on the CPU
torch.manual_seed(0)
pos, x = torch.rand(64, 3), torch.randn(64, 16, requires_grad=True)
conv = GeoPEPointTransformerConv(16, 32, pe="geope")
out = conv(x, pos, knn_graph(pos, 8))
out.square().sum().backward()
assert out.shape == (64, 32) and torch.isfinite(out).all() and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in conv.parameters() if p.requires_grad)
print(f"nn-minimal: {conv!r} forward and backward on 64 points x 8 neighbours, from {pointgeope.__file__}")
EOF

# 4. The commands: info prints what is missing; prepare (h5py) ends in one line, exit code 2.
"$DIR/venv/bin/pointgeope" info > info.txt
grep -q '^toolkit (the commands; pointgeope\[toolkit\]): missing .*h5py' info.txt || { cat info.txt; exit 1; }
"$DIR/venv/bin/pointgeope" synth raw --size tiny > /dev/null
set +e
"$DIR/venv/bin/pointgeope" prepare raw s3dis 2> prepare.err
rc=$?
set -e
expected='pointgeope prepare: error: h5py is not installed; the commands and train.py need the toolkit'"'"'s packages: pip install "pointgeope[toolkit]"'
if [ "$rc" != 2 ] || [ "$(cat prepare.err)" != "$expected" ]; then
    echo "nn-minimal: pointgeope prepare without the toolkit: exit $rc, expected 2 and one line:"; cat prepare.err; exit 1
fi
echo "nn-minimal: pointgeope info runs; prepare without the toolkit: one line, exit code 2"
cd - > /dev/null
rm -rf "$DIR"
echo "nn-minimal: finished in $(( $(date +%s) - start )) s"
