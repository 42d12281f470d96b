"""Tests of pointgeope/extras.py: the installs of pointgeope (base, ``nn``, ``toolkit``) as pyproject.toml declares
them, the one line of a command that misses a package of the toolkit, and what the base install runs.

A package is made "not installed" for a subprocess by ``tests/hidden_packages/sitecustomize.py`` (first on its
PYTHONPATH): the modules named in ``POINTGEOPE_TEST_HIDE`` are not found, as in an environment without them.
``make test-nn-minimal`` checks the same with a real ``pip install ".[nn]"`` in a fresh environment.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import subprocess
import sys

import pytest
import torch

from pointgeope.cli import main as cli
from pointgeope.errors import run_command
from pointgeope.extras import INSTALL_TOOLKIT, TOOLKIT_MODULES, missing_toolkit_package
from tests.conftest import REPO

HIDDEN_SITE = REPO / "tests" / "hidden_packages"
# PointTransformerSeg at test size (as tests/model/test_network.py)
TINY = dict(blocks=(1, 1, 1), planes=(16, 24, 32), strides=(1, 4, 4), neighbours=(8, 8, 8), decoder_blocks=(1, 1, 1),
            share_planes=8)


def run_without(hidden: list[str], args: list[str], cwd=REPO) -> subprocess.CompletedProcess:
    """``python ARGS`` with this checkout's code and the modules ``hidden`` not installed."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HIDDEN_SITE), str(REPO)]),
           "POINTGEOPE_TEST_HIDE": ",".join(hidden), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300,
                          check=False)


def message(package: str) -> str:
    return f"{package} is not installed; the commands and train.py need the toolkit's packages: {INSTALL_TOOLKIT}"


def requirement_names(requirements) -> set[str]:
    """``{"scipy", ...}`` of ``["scipy>=1.10", "laspy[lazrs]>=2.4", ...]``: the normalised project names."""
    return {re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9_.-]+", r).group(0)).lower() for r in requirements}


def test_the_hiding_site_hides_the_named_package_and_nothing_else():
    done = run_without(["h5py"], ["-c", "import importlib.util as u; "
                                        "print(u.find_spec('h5py'), u.find_spec('numpy') is not None); import h5py"])
    assert done.stdout == "None True\n"
    assert done.stderr.rstrip().endswith("ModuleNotFoundError: No module named 'h5py'")


def test_pyproject_extras_are_the_base_the_nn_layer_and_the_toolkit_of_extras_py():
    tomllib = pytest.importorskip("tomllib")            # Python >= 3.11
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert requirement_names(project["dependencies"]) == {"torch", "numpy"}
    assert requirement_names(extras["nn"]) == {"torch-geometric", "numba"}
    assert "pointgeope[nn]" in extras["toolkit"]        # the toolkit's data pipeline batches with torch-geometric
    own = [r for r in extras["toolkit"] if not r.startswith("pointgeope[")]
    assert requirement_names(own) | requirement_names(extras["nn"]) == set(TOOLKIT_MODULES.values())
    assert extras["all"] == ["pointgeope[toolkit,las]"]


def test_each_import_name_of_the_toolkit_is_its_distributions():
    owners = importlib.metadata.packages_distributions()
    for module, package in TOOLKIT_MODULES.items():
        assert importlib.util.find_spec(module) is not None, f"{package} is not installed where the tests run"
        assert package in requirement_names(owners[module]), f"import {module}: from {owners[module]}"


def test_only_a_missing_toolkit_module_is_the_environments(monkeypatch):
    def missing(name):
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    # a submodule of an installed package is a bug or a broken install, not a missing package
    assert missing_toolkit_package(ModuleNotFoundError("x", name="scipy.no_such_submodule")) is None
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else
                        find_spec(name, *a))                # matplotlib not installed: its submodule names it
    assert missing_toolkit_package(ModuleNotFoundError("x", name="matplotlib.pyplot")) == "matplotlib"
    assert missing_toolkit_package(ModuleNotFoundError("x", name="PIL")) == "pillow"
    assert missing_toolkit_package(ImportError("cannot import name 'x' from 'h5py'", name="h5py")) is None
    assert run_command("prog", missing, "yaml") == 2
    with pytest.raises(ModuleNotFoundError):             # a module that is no dependency: a bug, its traceback
        run_command("prog", missing, "pointgeope.no_such_module")
    with pytest.raises(ModuleNotFoundError):             # --debug shows the traceback of the missing package
        run_command("prog", missing, "h5py", debug=True)


@pytest.mark.slow
def test_a_command_missing_a_toolkit_package_says_which_and_how_to_install_it_in_one_line(tmp_path):
    raw, out, run = tmp_path / "raw", tmp_path / "s3dis", tmp_path / "run"
    assert cli(["synth", str(raw), "--size", "tiny"]) == 0       # the input, made in this process
    done = run_without(["h5py"], ["-m", "pointgeope", "prepare", str(raw), str(out)])
    assert (done.returncode, done.stderr, done.stdout) == (2, f"pointgeope prepare: error: {message('h5py')}\n", "")
    assert not out.exists() or not any(out.iterdir())   # nothing written (prepare makes its folder first)
    done = run_without(["yaml"], ["train.py", "--config", "configs/demo.yaml", "--test-area", "1", "--data-root",
                                  str(out), "--run-dir", str(run)])
    assert (done.returncode, done.stderr, done.stdout) == (2, f"train.py: error: {message('pyyaml')}\n", "")
    assert not run.exists() or not any(run.iterdir())
    done = run_without(["h5py"], ["-m", "pointgeope", "prepare", str(raw), str(out), "--debug"])
    assert done.returncode == 1 and done.stderr.rstrip().endswith("ModuleNotFoundError: No module named 'h5py'")


@pytest.mark.slow
def test_info_without_the_toolkit_prints_the_versions_and_the_layers_line():
    """Every command module imports without the toolkit (the parser lists them all), and `info` runs."""
    done = run_without(list(TOOLKIT_MODULES), ["-m", "pointgeope", "--help"])
    # the last command, listed (alone on its line when COLUMNS is narrow: argparse wraps to it)
    assert done.returncode == 0 and re.search(r"^    viz\b", done.stdout, re.M), done.stderr
    done = run_without(list(TOOLKIT_MODULES), ["-m", "pointgeope", "info"])
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1] == "packages:" and lines[2].startswith("  torch            ") and "not installed" not in lines[2]
    assert any(line.startswith("PyG layer (pointgeope.nn.GeoPEPointTransformerConv): tested with") for line in lines)
    assert "ops backends: cpu: knn=torch, fps=torch, interpolation=3-NN via knn=torch; " in done.stdout
    assert lines[-1] == "backbones, point hierarchies: the toolkit's (pyyaml is not installed)"


@pytest.mark.slow
def test_the_base_install_runs_the_network_as_the_toolkit_does(tmp_path):
    """Without the toolkit (pykdtree, scipy and numba too) the point ops take their pure-torch paths; the
    network's logits are those of this environment's default backends (the same samples and neighbours)."""
    script = f"""
import sys, torch
from pointgeope.model import PointTransformerSeg
from pointgeope.model.ops import backends
print(backends.knn_backend(torch.device("cpu")), backends.fps_backend(torch.device("cpu")))
torch.manual_seed(0)
model = PointTransformerSeg(pe="geope", **{TINY!r}).eval()
g = torch.Generator().manual_seed(1)
coord = torch.rand(200, 3, generator=g) * 3
feat = torch.cat([torch.rand(200, 3, generator=g), coord], dim=1)
with torch.no_grad():
    torch.save(model(coord, feat, torch.tensor([130, 200])), sys.argv[1])
print(sorted(m for m in sys.modules if m.split(".")[0] in {sorted(TOOLKIT_MODULES)!r}))
"""
    done = run_without(list(TOOLKIT_MODULES), ["-c", script, str(tmp_path / "logits.pt")])
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["torch torch", "[]"]
    from pointgeope.model import PointTransformerSeg
    from pointgeope.model.ops import backends

    assert backends.knn_backend(torch.device("cpu")) != "torch"    # the toolkit's backends are compared here
    torch.manual_seed(0)
    model = PointTransformerSeg(pe="geope", **TINY).eval()
    g = torch.Generator().manual_seed(1)
    coord = torch.rand(200, 3, generator=g) * 3
    feat = torch.cat([torch.rand(200, 3, generator=g), coord], dim=1)
    with torch.no_grad():
        expected = model(coord, feat, torch.tensor([130, 200]))
    torch.testing.assert_close(torch.load(tmp_path / "logits.pt"), expected)


def test_the_pyg_example_for_nn_users_runs_without_the_toolkit():
    """docs/own-network.md offers examples/pyg_point_transformer.py to ``pip install ".[nn]"`` users, but it
    built its room with the toolkit's raw-text parser and died on ``import pandas``; it samples the room with
    the generator in memory now. The nn extra's packages (torch-geometric with its tqdm, numba) stay."""
    hidden = sorted(set(TOOLKIT_MODULES) - {"torch_geometric", "tqdm", "numba"}) + ["laspy"]
    done = run_without(hidden, ["examples/pyg_point_transformer.py", "--steps", "1"])
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[0] == "one synthetic office: 3872 points in 4 blocks"
