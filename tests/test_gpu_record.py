"""Tests of bench/gpu_record.py: a GPU benchmark's JSON names the commit, whether the tree had changes beside
it (its own outputs under bench/results/ aside), and the machine's versions."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import gpu_record


def _git(tree: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tree, check=True,
                          capture_output=True, text=True).stdout.strip()


def test_the_tree_state_names_the_commit_and_the_changes_outside_the_results(tmp_path):
    _git(tmp_path, "init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "bench" / "results" / "gpu.json").write_text("{}\n")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "one")
    head = _git(tmp_path, "rev-parse", "HEAD")
    assert gpu_record.tree_state(tmp_path) == {"commit": head, "dirty": False, "changed": []}
    (tmp_path / "bench" / "results" / "gpu.json").write_text('{"steps": {}}\n')     # a run's own outputs
    (tmp_path / "bench" / "results" / "gpu_logs").mkdir()
    (tmp_path / "bench" / "results" / "gpu_logs" / "tests.log").write_text("ran\n")
    assert gpu_record.tree_state(tmp_path)["dirty"] is False
    (tmp_path / "code.py").write_text("x = 2\n")                                       # the code measured
    (tmp_path / "new.py").write_text("y = 1\n")
    assert gpu_record.tree_state(tmp_path) == {"commit": head, "dirty": True, "changed": [" M code.py", "?? new.py"]}


def test_outside_a_checkout_the_state_is_unknown(tmp_path):
    assert gpu_record.tree_state(tmp_path) == {"commit": "", "dirty": None, "changed": []}


def test_the_machine_names_the_versions_and_no_gpu_on_the_cpu():
    info = gpu_record.machine("cpu")
    assert info["gpu"] is None and info["torch"] == torch.__version__ and info["cuda"] == torch.version.cuda
    import triton
    assert info["triton"] == triton.__version__
