"""Tests of the PTv1 block's tail in eval mode (pointgeope/model/residual_norm.py): ``relu(batch_norm(x) +
identity)`` on the running buffers in one Triton launch (``normalize`` with ``RESIDUAL``), against the definition
written with torch's ``F.batch_norm`` in eval mode in float64; its gradients in eval; torch's path, unchanged, in
training and wherever the kernel does not take the call; the block's output with and without it; and the
``info --check`` rows that check it on a GPU."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")          # imported before TRITON_INTERPRET is set (test_fused_attention.py says why)
from pointgeope.model import kernels, residual_norm
from pointgeope.model.network import PointTransformerBlock
from pointgeope.model.residual_norm import BatchNormAddReLU


def _module(channels: int, dtype: torch.dtype) -> BatchNormAddReLU:
    """The module in eval mode with random parameters (some negative scales) and running buffers; float64 rows get
    a float64 module, the others float32 parameters (as under autocast)."""
    g = torch.Generator().manual_seed(channels)
    module = BatchNormAddReLU(channels).eval()
    module = module.double() if dtype == torch.float64 else module
    with torch.no_grad():
        module.weight.copy_(torch.rand(channels, generator=g) * 2 - 0.5)
        module.bias.copy_(torch.randn(channels, generator=g))
        module.running_mean.copy_(torch.randn(channels, generator=g))
        module.running_var.copy_(torch.rand(channels, generator=g) + 0.1)
    return module


def _definition(module: BatchNormAddReLU, x: torch.Tensor, identity: torch.Tensor) -> torch.Tensor:
    """``max(0, w (x - running_mean) / sqrt(running_var + eps) + b + identity)`` in float64 (torch's eval
    ``F.batch_norm`` for the norm), independent of the kernels and of the module's own torch path."""
    y = F.batch_norm(x.double(), module.running_mean.double(), module.running_var.double(), module.weight.double(),
                     module.bias.double(), False, 0.0, module.eps)
    return torch.relu(y + identity.double()).detach()


def _rows(rows: int, channels: int, dtype: torch.dtype, seed: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, channels, generator=g, dtype=torch.float64) * 2 + 0.3
    return x.to(dtype), torch.randn(rows, channels, generator=g, dtype=torch.float64).to(dtype)


# dtype -> rtol of the output against the float64 definition; atol is ATOL times the largest |bn(x)| + |identity|.
# float32: the kernel's scale and shift (a sqrt, a division, a product, an fma: a few ulps each) then an fma and
# an add, each rounding to 2^-24 of its operands' size: well under 1e-6 of the largest operand. float64 the same at
# 2^-53. bf16 and float16: that float32 result converted once to the output's type, against the unrounded
# definition: float16 rounds to nearest, half an ulp, 2^-11 of the value; bf16 (8 significant bits) half an ulp,
# 2^-8, on a GPU (cvt.rn), but Triton's interpreter truncates its float32 -> bf16 conversion: up to an ulp, 2^-7.
TOL = {torch.float32: 1e-6, torch.float64: 1e-13, torch.bfloat16: 8e-3, torch.float16: 5e-4}
ATOL = {torch.float32: 1e-6, torch.float64: 1e-13, torch.bfloat16: 1e-6, torch.float16: 1e-6}


@pytest.mark.parametrize("dtype", list(TOL))
@pytest.mark.parametrize("channels", [3, 70, 130])
def test_the_eval_tail_is_one_launch_of_the_definition(launched, dtype, channels):
    """301 rows (no multiple of a tile), 3, 70 and 130 channels (one partial block, two, three): one launch
    (``normalize``), the definition's value within the rounding above, the output in ``x``'s dtype, the module's
    parameters and buffers untouched."""
    module = _module(channels, dtype)
    before = {name: t.clone() for name, t in module.state_dict().items()}
    x, identity = _rows(301, channels, dtype)
    with warnings.catch_warnings(), torch.inference_mode():
        warnings.simplefilter("error", kernels.KernelFallbackWarning)
        y = module(x, identity)
    assert launched == ["normalize"]
    assert y.dtype == dtype and y.shape == x.shape
    want = _definition(module, x, identity)
    size = float((want - identity.double()).abs().max() + identity.double().abs().max())
    torch.testing.assert_close(y.double(), want, rtol=TOL[dtype], atol=ATOL[dtype] * size)
    assert int((y == 0).sum()) > 0 and int((y > 0).sum()) > 0       # both sides of the ReLU taken
    assert all(torch.equal(t, before[name]) for name, t in module.state_dict().items())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_eval_tail_is_within_one_rounding_of_torchs_path(interpreted, dtype):
    """Against torch's own path (eval ``BatchNorm1d``, the add, ``relu_``: the module with the kernel off): float32
    the same computation, so a few ulps at most of the operands (the CPU's norm need not fuse as the kernel does);
    bf16 the kernel converts the sum once (the interpreter truncates: under an ulp) where torch rounds the norm's
    output to nearest, then the sum: under two ulps (2^-6) of the output's size in all."""
    module = _module(70, dtype)
    x, identity = _rows(257, 70, dtype, seed=5)
    with torch.no_grad():
        y = module(x, identity)
        interpreted.setattr(residual_norm.EVAL_KERNEL, "enabled", lambda device: False)
        want = module(x, identity)
    size = float(want.float().abs().max())
    rtol, atol = (1e-6, 1e-6 * size) if dtype == torch.float32 else (2 ** -6, 2 ** -6 * size)
    torch.testing.assert_close(y.float(), want.float(), rtol=rtol, atol=atol)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("channels", [3, 130])
def test_eval_gradients_go_through_the_mask_to_the_identity_and_the_fixed_statistics_norm(launched, dtype, channels):
    """Eval with gradients on (a frozen-statistics fine-tune): forward one launch, backward the eval norm's two
    (``grad_sums``, ``grad_input``, after torch's mask ``where(out > 0)``); the gradients of ``x``, the identity,
    ``weight`` and ``bias`` those of the float64 definition's autograd. The identity is moved so that no sum lies
    within 0.05 of the ReLU's kink, where float32 and float64 could take the mask differently."""
    module = _module(channels, dtype)
    x, identity = _rows(301, channels, dtype, seed=7)
    pre = _definition(module, x, torch.zeros_like(identity)) + identity.double()
    identity = torch.where(pre.abs() < 0.05, identity + torch.where(pre >= 0, 0.1, -0.1).to(dtype), identity)
    x, identity = x.requires_grad_(), identity.requires_grad_()
    up = torch.randn(x.shape, generator=torch.Generator().manual_seed(8), dtype=dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error", kernels.KernelFallbackWarning)
        y = module(x, identity)
        forward = list(launched)
        y.backward(up)
    assert forward == ["normalize"] and launched[1:] == ["grad_sums", "grad_input"]
    x64, id64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, identity, module.weight, module.bias))
    want = torch.relu(F.batch_norm(x64, module.running_mean.double(), module.running_var.double(), w64, b64, False,
                                   0.0, module.eps) + id64)
    want.backward(up.double())
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    for got, ref in ((y, want), (x.grad, x64.grad), (identity.grad, id64.grad), (module.weight.grad, w64.grad),
                     (module.bias.grad, b64.grad)):
        torch.testing.assert_close(got.detach().double(), ref.detach(), rtol=tol,
                                   atol=tol * float(ref.detach().abs().max()))


def test_training_is_torchs_batch_norm_add_and_relu_with_its_buffers():
    """In training the module is ``BatchNorm1d``, the add and ``relu_`` (on the CPU's default path, no kernel): the
    same bits, the same running buffers and batch count as torch's modules."""
    ours, ref = _module(70, torch.float32).train(), torch.nn.BatchNorm1d(70).train()
    ref.load_state_dict(ours.state_dict())
    x, identity = _rows(200, 70, torch.float32, seed=3)
    got, want = ours(x, identity), torch.relu(ref(x) + identity)
    assert torch.equal(got, want)
    for name, t in ref.state_dict().items():
        assert torch.equal(ours.state_dict()[name], t), name


@pytest.mark.parametrize("case", ["broadcast", "dtype"])
@pytest.mark.parametrize("train", [False, True])
def test_what_the_kernels_do_not_take_runs_torchs_path(interpreted, case, train):
    """An identity that broadcasts or has another dtype (torch's add broadcasts and promotes): neither residual
    kernel runs; the norm (its own kernel here), torch's add and ReLU: torch's value, dtype and shape."""
    module = _module(70, torch.float32).train(train)
    x, identity = _rows(64, 70, torch.float32, seed=4)
    identity = {"broadcast": identity[:1], "dtype": identity.double()}[case]
    calls = []
    for kernel in (residual_norm.EVAL_KERNEL, residual_norm.KERNEL):
        interpreted.setattr(kernel, "triton", lambda *a, f=kernel.triton: calls.append(a[0].shape) or f(*a))
    with torch.no_grad():
        y = module(x, identity)
    assert calls == []
    want = torch.relu(F.batch_norm(x, None if train else module.running_mean, None if train else module.running_var,
                                   module.weight, module.bias, train, 0.0, module.eps) + identity)
    torch.testing.assert_close(y, want, rtol=1e-5, atol=1e-5)
    assert y.dtype == want.dtype and y.shape == want.shape


def test_the_block_in_eval_gives_the_same_output_with_and_without_the_kernel(interpreted):
    """A PTv1 block in eval (its third norm, add and ReLU on the kernel) against the same block with the kernel off
    (torch's norm, add and ReLU, as before): the same output within float32 rounding."""
    torch.manual_seed(0)
    block = PointTransformerBlock(16, 8, 4).eval()
    with torch.no_grad():
        block.bn3.running_mean.normal_()
        block.bn3.running_var.uniform_(0.5, 1.5)
    coord, feat = torch.rand(40, 3), torch.randn(40, 16)
    idx = torch.cdist(coord, coord).topk(4, largest=False).indices
    calls, fused = [], residual_norm.EVAL_KERNEL.triton
    interpreted.setattr(residual_norm.EVAL_KERNEL, "triton", lambda *a: calls.append(a[0].shape) or fused(*a))
    with torch.no_grad():
        y = block(coord, feat, idx)
        interpreted.setattr(residual_norm.EVAL_KERNEL, "enabled", lambda device: False)
        want = block(coord, feat, idx)
    assert calls == [torch.Size([40, 16])]
    torch.testing.assert_close(y, want, rtol=1e-6, atol=1e-6)


def test_info_check_has_the_eval_tails_rows(launched):
    """``info --check`` checks the kernel on the device: float32 and bfloat16 rows, forward (one launch) and
    backward (two), within their tolerance of torch's path."""
    from pointgeope.model.norm_check import residual_cases

    cases = residual_cases(False, torch.device("cpu"), 96, 6)
    assert [c.label for c in cases] == ["fwd+bwd float32 eval", "fwd+bwd bfloat16 eval"]
    for case in cases:
        launched.clear()
        got = case.run()
        assert launched == ["normalize", "grad_sums", "grad_input"]
        assert len(got) == 5            # the output and the gradients of x, identity, weight, bias
        diff, _ = case.compare(got, case.reference())
        assert diff <= case.tolerance


def _compiled_eval_tail(device: torch.device, rows: int, channels: int):
    """The module on ``device`` in eval, by default as the test's forward runs it: float32 under ``inference_mode``,
    bf16 under autocast (``x`` a bf16 ``Linear``'s output, the identity bf16, then float32: autocast's mixed case),
    float32 with gradients; returns what ran the kernel (the rows' dtypes) and every value to compare."""
    module = _module(channels, torch.float32).to(device)
    calls, fused = [], residual_norm.EVAL_KERNEL.triton
    g = torch.Generator(device=device).manual_seed(3)
    x = torch.randn(rows, channels, generator=g, device=device) * 2 + 0.3
    identity = torch.randn(rows, channels, generator=g, device=device)
    shifted = _definition(module, x, torch.zeros_like(identity)) + identity.double()
    identity = torch.where(shifted.abs() < 0.05, identity + torch.where(shifted >= 0, 0.1, -0.1).float(),
                           identity)                 # off the ReLU's kink, where a rounding alone decides the mask
    linear = torch.nn.Linear(channels, channels, bias=False).to(device)
    up = torch.randn(rows, channels, generator=g, device=device)
    with pytest.MonkeyPatch.context() as patch, warnings.catch_warnings():
        warnings.simplefilter("error", kernels.KernelFallbackWarning)
        patch.setattr(residual_norm.EVAL_KERNEL, "triton", lambda *a: calls.append(a[0].dtype) or fused(*a))
        with torch.inference_mode():
            y32 = module(x, identity)
        with torch.inference_mode(), torch.autocast(device.type, dtype=torch.bfloat16):
            h = linear(x)
            y16, mixed = module(h, identity.to(torch.bfloat16)), module(h, identity)
        xg, ig = x.clone().requires_grad_(), identity.clone().requires_grad_()
        yg = module(xg, ig)
        yg.backward(up)
    return calls, module, x, identity, h, up, y32, y16, mixed, yg, xg.grad, ig.grad


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("rows, channels", [(320_000, 64), (100_003, 3), (50_000, 96)])
def test_the_compiled_eval_tail_on_cuda_is_the_definition(monkeypatch, kernel_failures_forgotten, rows, channels):
    """The kernel compiled for the GPU, a CUDA default (``POINTGEOPE_KERNELS`` unset), as the test's forward runs it
    (:func:`_compiled_eval_tail`): outputs and gradients against the float64 definition, the kernel ran for float32
    and bf16 rows and for the gradients and did not fall back; a float32 identity beside bf16 rows takes torch's
    path, whose add promotes (a float32 output), as before the kernel."""
    monkeypatch.delenv("POINTGEOPE_KERNELS", raising=False)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    calls, module, x, identity, h, up, y32, y16, mixed, yg, dx, di = _compiled_eval_tail(torch.device("cuda"), rows,
                                                                                          channels)
    assert calls == [torch.float32, torch.bfloat16, torch.float32]
    assert y16.dtype == torch.bfloat16 and mixed.dtype == torch.float32
    want = _definition(module, x, identity)
    size = float((want - identity.double()).abs().max() + identity.abs().max())
    for got in (y32, yg):
        torch.testing.assert_close(got.detach().double(), want, rtol=TOL[torch.float32], atol=1e-6 * size)
    h16, i16 = h.float(), identity.to(torch.bfloat16).float()
    want16 = _definition(module, h16, i16)
    size = float((want16 - i16.double()).abs().max() + i16.abs().max())
    torch.testing.assert_close(y16.double(), want16, rtol=2 ** -8, atol=1e-6 * size)   # one rounding to nearest
    norm = float(F.batch_norm(h16.double(), module.running_mean.double(), module.running_var.double(),
                              module.weight.detach().double(), module.bias.detach().double(), False, 0.0,
                              module.eps).abs().max())
    torch.testing.assert_close(mixed.double(), _definition(module, h16, identity), rtol=1e-6,
                               atol=2 ** -7 * norm)           # torch's bf16 norm (an ulp), then a float32 add
    x64, id64, w64, b64 = (t.detach().double().requires_grad_() for t in (x, identity, module.weight, module.bias))
    ref = torch.relu(F.batch_norm(x64, module.running_mean.double(), module.running_var.double(), w64, b64, False,
                                  0.0, module.eps) + id64)
    ref.backward(up.double())
    for got, want_g in ((dx, x64.grad), (di, id64.grad), (module.weight.grad, w64.grad), (module.bias.grad, b64.grad)):
        torch.testing.assert_close(got.double(), want_g, rtol=1e-4, atol=1e-5 * float(want_g.abs().max()))
    assert residual_norm.EVAL_KERNEL.name not in kernels.failures()
