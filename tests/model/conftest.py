"""Fixtures of the model's kernel tests (none autouse: a module asks for them, e.g. by ``pytestmark``)."""
from __future__ import annotations

import pytest


@pytest.fixture
def interpreted(kernel_failures_forgotten):
    """Triton's interpreter and the Triton path (``TRITON_INTERPRET=1``, ``POINTGEOPE_KERNELS=triton``) for
    the asking test only (restored after it), with no kernel failure remembered before or after it (a kernel
    that failed in another test would hand this one the torch path). Yields the ``MonkeyPatch`` holding them,
    for the test's own changes (undone with them)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRITON_INTERPRET", "1")
        patch.setenv("POINTGEOPE_KERNELS", "triton")
        yield patch


@pytest.fixture
def launched(interpreted):
    """The names of the Triton kernels launched (``InterpretedFunction.run``, warm-ups not counted), in order."""
    from triton.runtime.interpreter import InterpretedFunction

    names, run = [], InterpretedFunction.run

    def counted(fn, *args, **kwargs):
        if not kwargs.get("warmup"):
            names.append(fn.__name__)
        return run(fn, *args, **kwargs)
    interpreted.setattr(InterpretedFunction, "run", counted)
    return names


@pytest.fixture
def interpreted_cpu(request):
    """``interpreted``, for a test that runs Triton kernels on CPU tensors: skipped on a CUDA machine, where
    Triton was imported compiled (``tests/conftest.py`` sets ``TRITON_INTERPRET`` only without CUDA) and
    its kernels cannot take CPU tensors."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("Triton runs compiled on this CUDA machine: its kernels cannot take CPU tensors")
    return request.getfixturevalue("interpreted")


@pytest.fixture
def torch_batch_norm(monkeypatch):
    """Batch norm (with its ReLU and without) on torch's path whatever ``POINTGEOPE_KERNELS`` says: its Triton
    kernels (``norm.KERNEL``, ``norm.PLAIN_KERNEL``, ``residual_norm.EVAL_KERNEL``, tested in test_norm.py,
    test_norm_plain.py and test_residual_norm.py) would mix a
    second kernel into a test that compares the attention's kernels with their torch path."""
    from pointgeope.model import norm, residual_norm
    monkeypatch.setattr(norm.KERNEL, "enabled", lambda device: False)
    monkeypatch.setattr(norm.PLAIN_KERNEL, "enabled", lambda device: False)
    monkeypatch.setattr(residual_norm.EVAL_KERNEL, "enabled", lambda device: False)


@pytest.fixture
def on(request):
    """``on(backend)``: the backend, after entering Triton's interpreter for ``"triton"`` (on CPU tensors)."""
    def enter(*names: str) -> None:
        if "triton" in names:
            request.getfixturevalue("interpreted_cpu")
    return enter
