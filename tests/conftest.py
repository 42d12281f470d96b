"""Shared fixtures: the reference material and the real S3DIS samples kept in ``tests/fixtures``.

Everything a test needs is inside the repository (``tests/fixtures/README.md`` says where each file
comes from), so a clone alone passes ``make test``.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"

# The Triton kernels (pointgeope/model/ops/triton_*.py) run on CPU tensors in Triton's interpreter where no
# CUDA device exists (tests/model/test_triton_ops.py). Triton reads TRITON_INTERPRET when it is imported
# (torch_geometric imports it), so it is set here, before any test module imports anything. It changes
# nothing else: without CUDA no Triton kernel can run compiled. On a CUDA machine the same tests run the
# compiled kernels on the GPU.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# One thread per pytest-xdist worker: two workers on two cores, no oversubscription.
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def stop_handlers_restored():
    """SIGINT and SIGTERM handled after each test as before it. ``cli``'s ``settle_exit`` ignores a second
    Ctrl-C after an exit code of 130 or 143, and a test that calls ``cli`` in-process with such an ending
    left the pytest worker ignoring SIGINT: every later test's child process inherited SIG_IGN, so a later
    test's Ctrl-C to ``train.py`` was lost (it trained on until its timeout)."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    yield
    for sig, handler in saved.items():
        if handler is not None:
            signal.signal(sig, handler)


@pytest.fixture
def kernel_failures_forgotten():
    """No Triton kernel failure recorded when the test starts, nor after it ends, whether it passed or not
    (a test that makes a kernel fail and stops partway would otherwise hand the torch path to later tests)."""
    from pointgeope.model import kernels

    kernels.reset()
    yield kernels
    kernels.reset()


@pytest.fixture
def figures_not_drawn(monkeypatch):
    """A report's figures as fixed bytes, for tests that read its tables, notes and file names, never a figure:
    matplotlib was most of a report's time. tests/test_report.py draws and checks the figures."""
    from pointgeope.report import plots

    monkeypatch.setattr(plots, "iou_bar_chart", lambda summaries: b"\x89PNG iou_per_class")
    monkeypatch.setattr(plots, "confusion_heatmap", lambda summary: f"\x89PNG {summary.name}".encode())


@pytest.fixture(scope="session")
def geope_vectors_path() -> Path:
    return FIXTURES / "geope_vectors.json"


@pytest.fixture(scope="session")
def s3dis_real() -> Path:
    """Two real S3DIS rooms in the raw layout: ``Area_1/office_2`` (100 points) and
    ``Area_2/office_resampled`` (44,032 points)."""
    return FIXTURES / "s3dis"


def process_ended(pid: int) -> bool:
    """Whether process ``pid`` has ended (Linux ``/proc``): gone, or a zombie not reaped yet. An orphan's
    zombie is reaped by PID 1, which in a container may be a process that never reaps (``docker exec`` beside
    ``sleep infinity``, a runner waiting for its one child): ``os.kill(pid, 0)`` succeeds on it for good."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def cuda_devices() -> list[str]:
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def module_imports(package) -> dict[Path, list[str]]:
    """The module names that each ``.py`` file under ``package`` (a module object) imports, read with
    ``ast`` (nothing is imported): for tests of the import direction."""
    import ast

    found = {}
    for path in sorted(Path(package.__file__).parent.rglob("*.py")):
        found[path] = [name for node in ast.walk(ast.parse(path.read_text()))
                       for name in ([a.name for a in node.names] if isinstance(node, ast.Import)
                                    else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])]
    return found
