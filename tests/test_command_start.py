"""What a command imports before it does its work: a mistake in a run's config is told before torch is imported
(``train``, ``ablate``: ~0.2 s of CPU, not the ~7 s of torch and torch_geometric), and the packages that one path
alone uses are imported by that path (bench/bench_command_start.py times it)."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import pointgeope.model

ROOT = Path(__file__).resolve().parents[1]
PTV3_DEMO = ROOT / "configs" / "demo_ptv3.yaml"
# What none of these commands' first steps needs: torch (~2 s), torch_geometric (~4 s, with torch._dynamo,
# pandas and Triton), scipy, numba.
HEAVY = ("torch", "torch_geometric", "scipy", "numba", "pandas", "triton")

# Each command line of argv[1] run by pointgeope's main in this one process, then a demo config read: the exit
# codes and the HEAVY packages imported by then.
CHILD = """
import json, sys
from pointgeope.cli import main
codes = [main(argv) for argv in json.loads(sys.argv[1])]
from pointgeope.engine.config import load_config
import pointgeope.engine.ablation
cfg = load_config(sys.argv[2])
print(json.dumps([codes, cfg.model.pe, sorted(m for m in json.loads(sys.argv[3]) if m in sys.modules)]))
"""


def fresh_output(code: str, timeout: int) -> str:
    """The stdout of ``python -c code`` in a fresh process from the repository's root (which must exit 0)."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, check=False,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_a_mistake_in_a_config_is_told_before_torch_is_imported(tmp_path):
    """``train`` imported torch, torch_geometric and the data code (~7 s of CPU) before it read its config, and a
    misspelt value was told after them; ``ablate``'s parent imported torch to read its trials' configs; PTv3's
    head widths and strides were checked by its torch modules."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  pe: geopee\n")
    lines = [["train", "--config", str(bad), "--test-area", "1"],
             ["train", "--config", str(tmp_path / "missing.yaml"), "--cv"],
             ["ablate", "--config", str(bad), "--test-area", "1", "--run-dir", str(tmp_path / "ab"),
              "--presets", "rpe,geope", "--seeds", "0"],
             # PTv3's rules (model.ptv3_rules): heads of 2 channels for pointrope's 6, a pooling stride of 3
             ["train", "--config", str(PTV3_DEMO), "--test-area", "1", "model.ptv3.enc_channels=[2, 36, 72]",
              "model.ptv3.enc_num_head=[1, 2, 4]", "model.pe=pointrope"],
             ["train", "--config", str(PTV3_DEMO), "--test-area", "1", "model.ptv3.stride=[2, 3]"]]
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(lines), str(ROOT / "configs" / "demo.yaml"),
                           json.dumps(HEAVY)], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == [[2, 2, 2, 2, 2], "geope", []]
    said = done.stderr.splitlines()
    assert len(said) == 5, done.stderr
    assert said[0].startswith(f"pointgeope train: error: {bad}:2: model.pe: expected one of ")
    assert said[0].endswith("got 'geopee'; did you mean 'geope'?")
    assert said[1].startswith(f"pointgeope train: error: expected a config file, found nothing at {tmp_path}")
    assert said[2] == said[0].replace("pointgeope train", "pointgeope ablate")
    told = f"pointgeope train: error: {PTV3_DEMO} with the overrides: model.ptv3."
    assert said[3] == told + "enc_channels[0] / enc_num_head[0] with model.pe=pointrope: expected head_dim >= 6 for " \
                             "pointrope, got 2"
    assert said[4] == told + "stride[1]: expected a power of two (1, 2, 4, 8, ...), got 3 (its pooling merges " \
                             "stride^3 voxels into one)"


def test_the_model_package_gives_its_names_from_their_modules():
    """``pointgeope.model`` imports a name of ``__all__`` at its first use (so that its ``config`` reads without
    torch): each is the object its module defines, and another name is an AttributeError as before."""
    from pointgeope.model import attention, config, network, ops, presets

    where = {"ModelConfig": config, "PointTransformerSeg": network, "PointTransformerBlock": network,
             "OpsBackends": network, "PointTransformerLayer": attention, "PositionalEncoding": presets,
             "PRESETS": presets, "HierarchySpec": ops, "PointHierarchy": ops}
    assert sorted(pointgeope.model.__all__) == sorted(where)
    for name, module in where.items():
        assert getattr(pointgeope.model, name) is getattr(module, name)
        assert name in dir(pointgeope.model)
    assert attention.PRESETS is presets.PRESETS and attention.PositionalEncoding is presets.PositionalEncoding
    with pytest.raises(AttributeError, match="has no attribute 'Nonesuch'"):
        pointgeope.model.Nonesuch  # noqa: B018


def test_the_model_package_gives_its_submodules_as_attributes():
    """Its eager ``__init__`` imported ``attention``, ``config``, ``network``, ``ops`` (and what they import), so
    ``import pointgeope.model as m; m.network`` worked; the lazy one gives a submodule at its first use too (a fresh
    process: in this one the submodules are already imported), not an AttributeError that depends on what ran
    before. ``presets`` and ``config`` import no torch: the access imports what it names, nothing more."""
    code = ("import sys, pointgeope.model as m; print(m.config.__name__, m.presets.__name__, 'torch' in sys.modules, "
            "hasattr(m, 'Nonesuch'))")
    out = fresh_output(code, timeout=60)
    assert out.split() == ["pointgeope.model.config", "pointgeope.model.presets", "False", "False"]


def test_the_kernel_registry_names_every_kernel_whatever_was_imported_before():
    """``pointgeope info`` and ``info --check`` list ``kernels.registered()`` in a process that has imported only
    the point ops: with the lazy package that was 5 of the kernels. A fresh process asks the registry first, then
    imports every module of the package (the definition: every kernel any module registers); the names agree."""
    code = ("import importlib, pkgutil, pointgeope.model as m; from pointgeope.model import kernels\n"
            "first = sorted(k.name for k in kernels.registered())\n"
            "for mod in pkgutil.walk_packages(m.__path__, 'pointgeope.model.'): importlib.import_module(mod.name)\n"
            "print(first == sorted(k.name for k in kernels.registered()), len(first))")
    out = fresh_output(code, timeout=120)
    same, count = out.split()
    assert same == "True" and int(count) >= 14, out


@pytest.mark.parametrize(("path", "package"), [("pointgeope/data/transforms.py", "scipy"),
                                               ("pointgeope/model/presets.py", "torch"),
                                               ("pointgeope/model/config.py", "torch"),
                                               ("pointgeope/engine/ablation_reuse.py", "pointgeope.engine.checkpoint"),
                                               ("pointgeope/engine/retrain.py", "pointgeope.engine.checkpoint")])
def test_a_package_one_path_uses_is_not_imported_at_module_level(path, package):
    """scipy.interpolate and scipy.ndimage (~0.5 s) served ``ElasticDistortion`` alone, which no recipe's pipeline
    uses, and were imported by every process that imports the data code (each train, evaluate, predict)."""
    for node in ast.parse((ROOT / path).read_text()).body:  # module level only
        names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                 else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
        assert not [n for n in names if n == package or n.startswith(package + ".")], f"{path}: imports {names}"


def test_the_commands_implementations_import_no_torch_geometric():
    """torch_geometric's import (~3.5 s of CPU, with torch._dynamo) was half of what ``train``, ``evaluate`` and
    ``predict`` paid before their first step, for its ``Data`` and ``Batch`` alone; the data path's samples and
    batches are now ``pointgeope.data.points.Points``. A fresh process imports the three implementations and a
    batch's collation; neither package is imported (PyG's layer, ``pointgeope.nn``, still imports it)."""
    code = ("import sys, pointgeope.engine.train, pointgeope.engine.evaluate, pointgeope.engine.predict\n"
            "from pointgeope.data.loader import make_loader\n"
            "from pointgeope.data.points import Points\n"
            "import torch\n"
            "batch = next(iter(make_loader([Points(pos=torch.zeros(2, 3), x=torch.zeros(2, 3))] * 2, 2)))\n"
            "print(type(batch).__name__, batch.num_graphs, [m for m in ('torch_geometric', 'torch._dynamo') "
            "if m in sys.modules])")
    out = fresh_output(code, timeout=120)
    assert out.split() == ["Points", "2", "[]"]
