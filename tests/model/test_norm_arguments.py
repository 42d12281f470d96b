"""Tests of the argument checks of pointgeope/model/norm.py's functions (``batch_norm_relu``, ``batch_norm``:
``norm.check_arguments``): what torch's ``F.batch_norm`` refuses is refused in one line before any kernel
runs, the kernel stays on, and what the kernel does not take but torch does gets torch's value. Under
Triton's interpreter (CPU tensors), where the kernel is the path."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")

from pointgeope.model import kernels, norm
from pointgeope.model.kernels import KernelArgumentError, KernelFallbackWarning

pytestmark = pytest.mark.usefixtures("interpreted_cpu")
FUNCTIONS = [pytest.param(norm.batch_norm_relu, norm.KERNEL, id="relu"),
             pytest.param(norm.batch_norm, norm.PLAIN_KERNEL, id="plain")]


def _args(rows=20, c=5, w=5, b=5, buffers=None, dtype=torch.float32, batch_stats=True):
    """``(x, weight, bias, running_mean, running_var, batch_stats)`` of the given sizes."""
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(rows, c, generator=g) * 3).to(dtype)
    rm, rv = (None, None) if buffers is None else (torch.zeros(buffers), torch.ones(buffers))
    return x, torch.rand(w, generator=g) + 0.5, torch.randn(b, generator=g), rm, rv, batch_stats


# Each refused by torch's F.batch_norm too (checked in the test), and what our line says.
TORCH_REFUSES = {
    "weight of 4 for 5 channels": (_args(w=4), r"expected weight of shape \(5,\) \(x's channels\).*got \(4,\)"),
    "bias of 6": (_args(b=6), r"expected bias of shape \(5,\).*got \(6,\)"),
    "running buffers of 3": (_args(buffers=3), r"expected running_mean of shape \(5,\).*got \(3,\)"),
    "int64 rows": (_args(dtype=torch.int64), r"floating dtype, got \(20, 5\) torch.int64"),
    "one row in training": (_args(rows=1, buffers=5), r"more than 1 row per channel.*got x of shape \(1, 5\)"),
    "eval without running buffers": (_args(batch_stats=False), r"batch_stats=False .* pass running_mean"),
}


@pytest.mark.parametrize("fn, kernel", FUNCTIONS)
@pytest.mark.parametrize("case", sorted(TORCH_REFUSES))
def test_what_torch_refuses_is_refused_before_the_kernel_and_the_kernel_stays_on(fn, kernel, case, monkeypatch):
    args, said = TORCH_REFUSES[case]
    x, w, b, rm, rv, batch_stats = args
    with pytest.raises((RuntimeError, ValueError, NotImplementedError)):       # the definition refuses them
        F.batch_norm(x, rm, rv, w, b, batch_stats)
    launched = []
    monkeypatch.setattr(kernel, "triton", lambda *a: launched.append(a))
    before = None if rv is None else rv.clone()
    with pytest.raises(KernelArgumentError, match=said):
        fn(*args)
    assert launched == [] and kernels.failures() == {}
    assert before is None or torch.equal(rv, before)                            # running_var not moved


@pytest.mark.parametrize("fn, kernel", FUNCTIONS)
def test_a_3d_input_is_one_line_and_leaves_the_kernel_on(fn, kernel):
    """The functions take ``(R, C)`` rows (the modules hand other shapes to torch): a 3-D ``x`` used to fail
    inside the kernel's wrapper, which turned the kernel off for the process with a warning blaming the GPU."""
    _, w, b, *_ = _args(c=4, w=4, b=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error", KernelFallbackWarning)
        with pytest.raises(KernelArgumentError, match=r"expected x of shape \(R, C\).*got \(20, 4, 2\)"):
            fn(torch.randn(20, 4, 2), w, b)
    assert kernels.failures() == {}
    kernel.ran.clear()
    x, w, b, *_ = _args()
    fn(x, w, b)
    assert kernel.ran == {"triton"}


@pytest.mark.parametrize("fn, kernel", FUNCTIONS)
@pytest.mark.parametrize("case", ["no affine", "float64 weight of float32 rows"])
def test_what_torch_takes_and_the_kernel_does_not_gets_torch_s_value_without_a_fallback(fn, kernel, case):
    x, w, b, *_ = _args()
    w, b = (None, None) if case == "no affine" else (w.double(), b.double())
    kernel.ran.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error", KernelFallbackWarning)
        if case == "no affine":
            got = fn(x, w, b)
            want = F.batch_norm(x, None, None, None, None, True)
            torch.testing.assert_close(got, want.relu() if fn is norm.batch_norm_relu else want)
        else:       # torch refuses this pair: its own error, not a kernel failure
            with pytest.raises(RuntimeError):
                fn(x, w, b)
    assert kernels.failures() == {} and kernel.ran == {"torch"}
