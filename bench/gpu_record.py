"""What a GPU benchmark's JSON records about the run that made it, so that the file alone says which code and
which machine: the commit, whether the tree had changes beside it, the GPU, torch, CUDA and Triton. The GPU
check's ``gpu.json`` (``gpu_runner.Check``) and ``bench_train_step``, ``bench_graphs``, ``bench_norm`` record it.

``dirty`` looks at the tree outside ``bench_io.OUTPUTS`` (``bench/results/``, where the check and the benchmarks
write their own JSON and logs while they run), as the CPU benchmarks' provenance does: ``True`` where
``git status --porcelain`` lists a change there, a new file included (the device machine gets the working
tree, untracked files too; the CPU provenance leaves untracked files out), ``None`` outside a git checkout
(``bench_io.git_state`` is the one owner of that rule).
"""
from __future__ import annotations

from pathlib import Path

from bench_io import OUTPUTS, ROOT, git_state


def tree_state(tree: Path = ROOT) -> dict:
    """``{"commit": HEAD, "dirty": bool | None, "changed": the first porcelain lines}`` of ``tree``, its
    changes outside :data:`OUTPUTS`, new files included (:func:`bench_io.git_state`)."""
    return git_state(tree, exclude=(OUTPUTS,), untracked=True)


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
