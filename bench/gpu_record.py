"""What a GPU benchmark's JSON records about the run that made it, so that the file alone says which code and
which machine: the commit, whether the tree had changes beside it, the GPU, torch, CUDA and Triton. The GPU
check's ``gpu.json`` (``gpu_runner.Check``) and ``bench_train_step``, ``bench_graphs``, ``bench_norm`` record it.

``dirty`` looks at the tree outside ``bench/results/`` (where the check and the benchmarks write their own
JSON and logs while they run): ``True`` where ``git status --porcelain`` lists a change there, ``None`` outside
a git checkout. (``bench_io.git_commit`` is HEAD alone; one owner of both is for the merge to settle.)
"""
from __future__ import annotations

import subprocess
from pathlib import Path

from bench_io import ROOT, git_commit

OUTPUTS = "bench/results"            # what the runs themselves write: not a change of the code measured


def tree_state(tree: Path = ROOT) -> dict:
    """``{"commit": HEAD, "dirty": bool | None, "changes": the first 20 changed paths}`` of ``tree``."""
    commit = git_commit(tree=tree)
    try:
        proc = subprocess.run(["git", "status", "--porcelain", "--", ".", f":(exclude){OUTPUTS}"], cwd=tree,
                              capture_output=True, text=True)
    except OSError:
        proc = None
    if not commit or proc is None or proc.returncode != 0:
        return {"commit": commit, "dirty": None, "changes": []}
    changes = [line[3:] for line in proc.stdout.splitlines() if line.strip()]
    return {"commit": commit, "dirty": bool(changes), "changes": changes[:20]}


def machine(device: str) -> dict:
    """The GPU's name (``None`` off CUDA), torch, its CUDA and Triton versions (``None`` where not importable)."""
    import torch

    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    on_cuda = str(device).startswith("cuda") and torch.cuda.is_available()
    return {"gpu": torch.cuda.get_device_name(torch.device(device)) if on_cuda else None,
            "torch": torch.__version__, "cuda": torch.version.cuda, "triton": triton_version}


def run_record(device: str) -> dict:
    """:func:`tree_state` and :func:`machine` in one mapping, the ``run`` entry of a benchmark's JSON."""
    return {**tree_state(), **machine(device)}
