"""Tests of bench/gpu_record.py: a GPU benchmark's JSON names the commit, whether the tree had changes beside
it (its own outputs under bench/results/ aside), and the machine's versions."""
from __future__ import annotations

import torch

import gpu_record


def test_the_tree_state_names_the_commit_and_the_changes_outside_the_results(checkout, git):
    (checkout / "bench" / "results").mkdir(parents=True)
    (checkout / "bench" / "results" / "gpu.json").write_text("{}\n")
    git(checkout, "add", "-A")
    git(checkout, "commit", "-q", "-m", "two")
    head = git(checkout, "rev-parse", "HEAD")
    assert gpu_record.tree_state(checkout) == {"commit": head, "dirty": False, "changed": []}
    (checkout / "bench" / "results" / "gpu.json").write_text('{"steps": {}}\n')     # a run's own outputs
    (checkout / "bench" / "results" / "gpu_logs").mkdir()
    (checkout / "bench" / "results" / "gpu_logs" / "tests.log").write_text("ran\n")
    assert gpu_record.tree_state(checkout)["dirty"] is False
    (checkout / "code.py").write_text("x = 2\n")                                       # the code measured
    (checkout / "new.py").write_text("y = 1\n")
    assert gpu_record.tree_state(checkout) == {"commit": head, "dirty": True, "changed": [" M code.py", "?? new.py"]}


def test_outside_a_checkout_the_state_is_unknown(tmp_path):
    assert gpu_record.tree_state(tmp_path) == {"commit": "", "dirty": None, "changed": []}


def test_the_machine_names_the_versions_and_no_gpu_on_the_cpu():
    info = gpu_record.machine("cpu")
    assert info["gpu"] is None and info["torch"] == torch.__version__ and info["cuda"] == torch.version.cuda
    import triton
    assert info["triton"] == triton.__version__
