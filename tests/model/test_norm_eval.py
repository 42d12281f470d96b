"""Tests of the batch norm's eval forward (pointgeope/model/norm.py): one Triton launch (``normalize`` makes its
scale and shift from the running buffers), the value torch's ``F.batch_norm`` in eval mode (and ``relu``) gives,
for float32, float64, bfloat16 and float16 rows, inside a padded batch and out of it, with and without affine
parameters (without: torch's path, no launch), and ``info --check``'s eval rows (the next GPU run checks the
eval forward on the device)."""
from __future__ import annotations

import contextlib
import warnings

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")          # imported before TRITON_INTERPRET is set (test_fused_attention.py says why)
from pointgeope.model import kernels, norm, padding


def _module(relu: bool, channels: int, dtype: torch.dtype, affine: bool) -> norm.BatchNorm:
    """The module in eval mode with random running buffers (and parameters where ``affine``); float64 rows get a
    float64 module, the others float32 parameters (as under autocast)."""
    g = torch.Generator().manual_seed(channels)
    module = (norm.BatchNormReLU if relu else norm.BatchNorm)(channels, affine=affine).eval()
    module = module.double() if dtype == torch.float64 else module
    with torch.no_grad():
        if affine:
            module.weight.copy_(torch.rand(channels, generator=g) * 2 - 0.5)     # some negative scales too
            module.bias.copy_(torch.randn(channels, generator=g))
        module.running_mean.copy_(torch.randn(channels, generator=g))
        module.running_var.copy_(torch.rand(channels, generator=g) + 0.1)
    return module


def _reference(module: norm.BatchNorm, x: torch.Tensor) -> torch.Tensor:
    """torch's ``F.batch_norm`` in eval mode (and ``relu``) in float64 on the module's buffers, rounded once to
    ``x``'s dtype: the definition, independent of the kernels."""
    w, b = (None, None) if module.weight is None else (module.weight.double(), module.bias.double())
    y = F.batch_norm(x.double(), module.running_mean.double(), module.running_var.double(), w, b, False, 0.0,
                     module.eps)
    return (torch.relu(y) if module.relu else y).to(x.dtype)


# dtype -> (rtol, atol) of the output against the float64 definition rounded once: float32 arithmetic on
# float32 buffers (a few ulps), float64 to rounding, half types one ulp of theirs (the float32 result rounded).
TOL = {torch.float32: (1e-6, 1e-6), torch.float64: (1e-13, 1e-13), torch.bfloat16: (8e-3, 1e-2),
       torch.float16: (1e-3, 1e-3)}


@pytest.mark.parametrize("dtype", list(TOL))
@pytest.mark.parametrize("relu", [True, False])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("padded", [False, True])
def test_the_eval_forward_is_one_launch_of_torch_batch_norm(launched, dtype, relu, affine, padded):
    """130 channels (three channel blocks), 301 rows (no multiple of a tile), no gradient: with affine parameters
    one launch (``normalize``), the value of ``F.batch_norm`` in eval mode on every row (a padded batch's dummy
    rows too: eval takes no batch statistics) and the buffers untouched; without them torch's path, no launch."""
    module = _module(relu, 130, dtype, affine)
    before = {name: t.clone() for name, t in module.state_dict().items()}
    g = torch.Generator().manual_seed(2)
    x = (torch.randn(301, 130, generator=g, dtype=torch.float64) * 2 + 0.3).to(dtype)
    rows = padding.batch_rows({301: torch.tensor(250)}) if padded else contextlib.nullcontext()
    with warnings.catch_warnings(), torch.no_grad(), rows:
        warnings.simplefilter("error", kernels.KernelFallbackWarning)
        y = module(x)
    assert launched == (["normalize"] if affine else [])
    assert y.dtype == dtype and y.shape == x.shape
    rtol, atol = TOL[dtype]
    torch.testing.assert_close(y, _reference(module, x), rtol=rtol, atol=atol)
    assert all(torch.equal(t, before[name]) for name, t in module.state_dict().items())


@pytest.mark.parametrize("relu", [True, False])
def test_the_eval_forward_under_inference_mode_is_one_launch(launched, relu):
    """As the test of a trained model runs it (``torch.inference_mode``, ``engine/evaluate.vote_room``): one
    launch, torch's value."""
    module = _module(relu, 70, torch.float32, True)
    x = torch.randn(200, 70, generator=torch.Generator().manual_seed(4)) * 2
    with torch.inference_mode():
        y = module(x)
    assert launched == ["normalize"]
    torch.testing.assert_close(y, _reference(module, x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("relu", [True, False])
def test_info_check_has_eval_rows_that_run_the_one_launch(launched, relu):
    """``info --check`` checks the eval forward on the device: float32 and bfloat16 rows labelled ``eval`` whose
    kernel side launches ``normalize`` alone forward (then the backward's two), within their tolerance of torch's."""
    from pointgeope.model.norm_check import check_cases

    cases = [c for c in check_cases(relu, torch.device("cpu"), 96, 6) if c.label.endswith(" eval")]
    assert [c.label for c in cases] == ["fwd+bwd float32 eval", "fwd+bwd bfloat16 eval"]
    for case in cases:
        launched.clear()
        got = case.run()
        assert launched == ["normalize", "grad_sums", "grad_input"]
        diff, _ = case.compare(got, case.reference())
        assert diff <= case.tolerance


@pytest.mark.parametrize("relu", [True, False])
@pytest.mark.parametrize("track, momentum", [(False, 0.1), (True, None)])
def test_eval_without_running_buffers_or_with_a_cumulative_momentum_matches_torch_with_gradients(
        launched, relu, track, momentum):
    """Eval with gradients on (a frozen-statistics fine-tune) in the two modes beside the default:
    ``track_running_stats=False`` (no running buffers: eval normalises by the batch's own statistics, so the two
    training launches, and the gradient through the statistics) and ``momentum=None`` (a cumulative average: eval
    still takes the running buffers, one launch). Output and the gradients of ``x``, ``weight`` and ``bias``
    against ``F.batch_norm``'s float64 autograd (``training`` as ``BatchNorm1d`` decides it: no buffers, batch
    statistics); the module's state untouched."""
    module = (norm.BatchNormReLU if relu else norm.BatchNorm)(70, momentum=momentum, track_running_stats=track)
    g = torch.Generator().manual_seed(9)
    with torch.no_grad():
        module.weight.copy_(torch.rand(70, generator=g) * 2 - 0.5)
        module.bias.copy_(torch.randn(70, generator=g))
        if track:
            module.running_mean.copy_(torch.randn(70, generator=g))
            module.running_var.copy_(torch.rand(70, generator=g) + 0.1)
    module.eval()
    before = {name: t.clone() for name, t in module.state_dict().items()}
    x = (torch.randn(301, 70, generator=g) * 2 + 0.3).requires_grad_()
    up = torch.randn(301, 70, generator=g)
    with warnings.catch_warnings():
        warnings.simplefilter("error", kernels.KernelFallbackWarning)
        y = module(x)
        forward = list(launched)
        y.backward(up)
    assert forward == (["normalize"] if track else ["statistics", "normalize"])
    assert launched[len(forward):] == ["grad_sums", "grad_input"]
    x64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, module.weight, module.bias))
    buffers = (module.running_mean.double(), module.running_var.double()) if track else (None, None)
    want = F.batch_norm(x64, *buffers, w64, b64, not track, 0.0, module.eps)
    want = torch.relu(want) if relu else want
    want.backward(up.double())
    for got, ref in ((y, want), (x.grad, x64.grad), (module.weight.grad, w64.grad), (module.bias.grad, b64.grad)):
        torch.testing.assert_close(got.detach().double(), ref.detach(), rtol=1e-5, atol=1e-5 * float(ref.abs().max()))
    assert all(torch.equal(t, before[name]) for name, t in module.state_dict().items())
