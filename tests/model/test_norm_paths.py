"""Tests of which path pointgeope/model/norm.py's fused norms take (the numbers on each path: test_norm.py): the
torch path (exactly torch's ``BatchNorm1d``, no Triton function called), the CUDA default the torch switch turns
off, a kernel that fails forward or backward (torch's results, the running buffers moved once) and a backward
that follows its forward's path, not the switch."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")          # imported before TRITON_INTERPRET is set (test_fused_attention.py says why)
from pointgeope.model import kernels, norm
from pointgeope.model.kernel_choice import forced
from tests.model.test_gather_backward import Launches
from tests.model.test_kernels import Failing
from tests.model.test_norm import NORMS, _pair, _run


@pytest.mark.parametrize("kernel, cls, relu", NORMS)
@pytest.mark.parametrize("path", [None, "torch"])
def test_the_torch_path_is_torchs_module_exactly(monkeypatch, path, kernel, cls, relu):
    """On the CPU (unset) and with ``POINTGEOPE_KERNELS=torch``: bitwise torch's ``BatchNorm1d`` (+ ``relu``
    for ``BatchNormReLU``), outputs, gradients and buffers, and no Triton function is called."""
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setenv("POINTGEOPE_KERNELS", path or "")
    monkeypatch.setattr(getattr(norm, kernel), "triton", lambda *a: pytest.fail("the Triton function ran"))
    ours, ref = _pair(10, cls=cls)
    x, g = torch.randn(64, 10), torch.randn(64, 10)
    for got, want in zip(_run(ours, x, g), _run(ref, x, g, relu=relu), strict=True):
        assert torch.equal(got, want)
    assert torch.equal(ours.running_var, ref.running_var)


def test_a_cuda_default_that_the_torch_switch_turns_off(monkeypatch):
    """Registered as a CUDA default (measured to pay on an H200): on CUDA tensors Triton unset and with
    ``POINTGEOPE_KERNELS=triton``, as the fused ``relation``; torch's path with ``POINTGEOPE_KERNELS=torch``."""
    from pointgeope.model import fused_attention

    cuda = torch.device("cuda")
    monkeypatch.delenv("POINTGEOPE_KERNELS", raising=False)
    monkeypatch.setattr(torch, "are_deterministic_algorithms_enabled", lambda: False)
    with forced("triton"):
        assert norm.KERNEL.enabled(cuda) == kernels.triton_imports()
    with forced("torch"):
        assert not norm.KERNEL.enabled(cuda)
    assert kernels.current().path is None
    assert norm.KERNEL.enabled(cuda) == kernels.triton_imports()
    assert fused_attention.KERNELS["relation"].enabled(cuda) == kernels.triton_imports()


def _failing() -> Failing:
    """A kernel whose launch raises a compiler error."""
    return Failing(RuntimeError("PassManager::run failed (injected)"))


def test_a_failing_kernel_leaves_the_running_buffers_to_the_torch_path(interpreted):
    """The last forward kernel fails (after the statistics ran): one warning, torch's output, and the running
    buffers moved once, as torch's."""
    interpreted.setattr(norm.triton_kernels(), "normalize", _failing())
    ours, ref = _pair(7)
    x, g = torch.randn(40, 7) * 2, torch.randn(40, 7)
    with pytest.warns(kernels.KernelFallbackWarning, match="batch_norm_relu"):
        got = _run(ours, x, g)
    for a, b in zip(got, _run(ref, x, g, relu=True), strict=True):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(ours.running_mean, ref.running_mean, rtol=0, atol=1e-7)
    torch.testing.assert_close(ours.running_var, ref.running_var, rtol=0, atol=1e-7)


@pytest.mark.parametrize("fails_between", [False, True])
def test_the_backward_follows_the_forwards_path_not_the_switch(interpreted, fails_between):
    """A forward under ``forced("triton")`` and its backward outside it (where the switch, unset, says torch
    on the CPU; autograd's backward thread may not see the block on CUDA): the Triton backward runs, unless
    the kernel failed in between (then torch's gradients). Both give torch's gradients."""
    interpreted.delenv("POINTGEOPE_KERNELS")
    k = norm.triton_kernels()
    spy = Launches(k.grad_input)
    interpreted.setattr(k, "grad_input", spy)
    ours, ref = _pair(9)
    x, g = (torch.randn(60, 9) + 0.3).requires_grad_(), torch.randn(60, 9)
    assert not norm.KERNEL.enabled(x.device)
    with forced("triton"):
        y = ours(x)
    if fails_between:
        with pytest.warns(kernels.KernelFallbackWarning, match="batch_norm_relu"):
            kernels.fail("batch_norm_relu", RuntimeError("injected"))
    y.backward(g)
    assert spy.count == (0 if fails_between else 1)
    want = _run(ref, x, g, relu=True)
    for got, w in zip((y.detach(), x.grad, ours.weight.grad, ours.bias.grad), want, strict=True):
        torch.testing.assert_close(got, w)


@pytest.mark.parametrize("train", [True, False])
def test_a_failing_backward_gives_torchs_gradients(interpreted, train):
    interpreted.setattr(norm.triton_kernels(), "grad_input", _failing())
    ours, ref = _pair(9)
    ours.train(train), ref.train(train)
    x, g = torch.randn(60, 9) + 0.3, torch.randn(60, 9)
    with pytest.warns(kernels.KernelFallbackWarning, match="batch_norm_relu"):
        got = _run(ours, x, g)
    for a, b in zip(got, _run(ref, x, g, relu=True), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
