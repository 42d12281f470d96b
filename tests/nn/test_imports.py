"""pointgeope.nn without the toolkit's other dependencies: the functional API and knn_graph import and run with
torch-geometric and the data/viz/training packages blocked; the layer then says what to install."""
from __future__ import annotations

import subprocess
import sys

from pointgeope.extras import TOOLKIT_MODULES
from tests.conftest import REPO

BLOCKED = sorted(TOOLKIT_MODULES)      # every import of the toolkit and nn extras, torch-geometric and numba too


def test_functional_api_and_knn_graph_run_without_torch_geometric_or_the_toolkits_dependencies():
    script = f"""
import sys
for name in {BLOCKED!r}:
    sys.modules[name] = None                      # import name -> ImportError
import torch
from pointgeope.nn import geope_attention, knn_graph
pos = torch.rand(6, 3)
assert knn_graph(pos, 2, backend="torch").shape == (2, 12)
q = torch.randn(1, 2, 6, 9)
assert geope_attention(q, q, q, pos).shape == (1, 2, 6, 9)
from pointgeope.nn import GeoPEPointTransformerConv
try:
    GeoPEPointTransformerConv(4, 12)
except ImportError as error:
    print(error)
loaded = sorted(name for name in sys.modules if name.split(".")[0] in ("data_prep", "pointgeope")
                and name.split(".")[1:2] in (["data"], ["engine"], ["viz"], ["report"], ["scans"]))
print("toolkit modules:", loaded)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=300,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "pointgeope.nn.GeoPEPointTransformerConv needs torch-geometric (pip install \"pointgeope[nn]\"); knn_graph, "
        "geope_qk and geope_attention do not", "toolkit modules: []"]


def test_without_torch_geometric_the_layer_imports_and_using_it_says_what_to_install():
    """torch-geometric not installed (hidden from the path finder): the star import, the from-import and
    ``hasattr`` see the layer's name (a stand-in, no torch-geometric imported); constructing it or subclassing it
    raises an ImportError saying what to install, in one line."""
    from tests.test_extras import run_without

    script = """
import sys
import pointgeope.nn as nn_module
from pointgeope.nn import *
from pointgeope.nn import GeoPEPointTransformerConv as layer
print(sorted(name for name in dir() if not name.startswith("_") and name not in ("nn_module", "layer", "sys")))
print(hasattr(nn_module, "GeoPEPointTransformerConv"), "torch_geometric" in sys.modules)
for use in ("layer(4, 12)", "GeoPEPointTransformerConv(4, 12, pe='geope')",
            "class Mine(nn_module.GeoPEPointTransformerConv): pass"):
    try:
        exec(use)
    except Exception as error:
        print(type(error).__name__, error)
"""
    done = run_without(["torch_geometric"], ["-c", script])
    assert done.returncode == 0, done.stderr
    line = ('pointgeope.nn.GeoPEPointTransformerConv needs torch-geometric (pip install "pointgeope[nn]"); knn_graph, '
            "geope_qk and geope_attention do not")
    assert done.stdout.splitlines() == [
        "['GeoPEPointTransformerConv', 'TESTED_PYG_VERSIONS', 'geope_attention', 'geope_qk', 'knn_graph']",
        "True False", *[f"ImportError {line}"] * 3]


def test_with_torch_geometric_the_layer_is_in_the_star_import():
    import pointgeope.nn as nn_module

    assert "GeoPEPointTransformerConv" in nn_module.__all__ and hasattr(nn_module, "GeoPEPointTransformerConv")
