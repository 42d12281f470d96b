"""Tests of the PTv1 block's tail in training on the kernels (pointgeope/model/residual_norm.py, opt-in:
``POINTGEOPE_KERNELS=triton``): ``relu(batch_norm(x) + identity)`` with the batch's statistics in two launches
forward and two backward (the ReLU's mask applied in both, the identity's gradient stored by the second),
against torch's ``BatchNorm1d``, add and ReLU by autograd in float64 (values; gradients of ``x``, the identity,
``weight`` and ``bias``; running buffers and ``num_batches_tracked``), also in a padded batch (the statistics of
the real rows), and its registration."""
from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

pytest.importorskip("triton")          # imported before TRITON_INTERPRET is set (test_fused_attention.py says why)
from pointgeope.model import kernels, padding, residual_norm
from pointgeope.model.residual_norm import BatchNormAddReLU
from tests.model.test_residual_norm import _module


def _pair(channels: int, dtype: torch.dtype) -> tuple[BatchNormAddReLU, torch.nn.BatchNorm1d]:
    """The module in training with random parameters (some negative scales) and buffers, and torch's ``BatchNorm1d``
    in float64 with the same state: the reference."""
    ours = _module(channels, dtype).train()
    ref = torch.nn.BatchNorm1d(channels).double().train()
    ref.load_state_dict(ours.state_dict())
    return ours, ref


def _inputs(ours, rows: int, dtype: torch.dtype, valid: int | None = None):
    """``x``, an identity moved so that no sum of the float64 definition (the first ``valid`` rows' statistics)
    lies within 0.05 of the ReLU's kink (where float32 and float64 could take the mask differently), and an
    upstream gradient."""
    g = torch.Generator().manual_seed(rows)
    x = torch.randn(rows, ours.num_features, generator=g, dtype=torch.float64) * 2 + 0.3
    identity = torch.randn(x.shape, generator=g, dtype=torch.float64)
    real = x[:valid]
    pre = ((x - real.mean(0)) / (real.var(0, unbiased=False) + ours.eps).sqrt() * ours.weight.double()
           + ours.bias.double() + identity).detach()
    identity = torch.where(pre.abs() < 0.05, identity + torch.where(pre >= 0, 0.1, -0.1), identity)
    return x.to(dtype), identity.to(dtype), torch.randn(x.shape, generator=g, dtype=torch.float64).to(dtype)


def _reference(ref, x, identity, up, valid: int | None = None):
    """torch's norm (``BatchNorm1d``; a padded batch: ``F.batch_norm`` with the first ``valid`` rows' statistics,
    the running buffers moved by them), add and ReLU in float64, and the gradients of ``x``, the identity,
    ``weight`` and ``bias`` by autograd."""
    x, identity = (t.detach().double().requires_grad_() for t in (x, identity))
    if valid is None:
        y = ref(x)
    else:
        real = x[:valid]
        mean, var = real.mean(0), real.var(0, unbiased=False)
        y = (x - mean) / (var + ref.eps).sqrt() * ref.weight + ref.bias
        with torch.no_grad():
            ref.running_mean.mul_(0.9).add_(0.1 * mean)
            ref.running_var.mul_(0.9).add_(0.1 * real.var(0, unbiased=True))
            ref.num_batches_tracked.add_(1)
    out = torch.relu(y + identity)
    out.backward(up.double())
    return [out.detach(), x.grad, identity.grad, ref.weight.grad, ref.bias.grad]


@pytest.mark.parametrize("dtype, channels, rows", [(torch.float64, 3, 301), (torch.float64, 130, 520),
                                                    (torch.float32, 3, 301), (torch.float32, 70, 301)])
@pytest.mark.parametrize("valid", [None, 0.9])
def test_training_on_the_kernels_is_torchs_norm_add_and_relu(launched, dtype, channels, rows, valid):
    """3, 70 and 130 channels (one partial channel block, two, three; 520 rows of 130 in float64: 33 partials of
    16 rows, three steps of 16 in the reduction, whose path holds float64's two blocks and two steps of 70 x 301,
    no longer run; float32 in one and two blocks, its more steps are test_norm_buffers.py's 70 channels of 67
    partials, its three blocks test_norm_launches.py's, on the same statistics and sums kernels), outside
    and inside a padded batch (the last tenth of the rows dummy): forward the statistics and ``normalize`` (two
    launches), backward ``grad_sums`` and ``grad_input``; output, gradients, running buffers and
    the batch count torch's, to 1e-12 in float64 and 1e-5 of the largest value in float32."""
    ours, ref = _pair(channels, dtype)
    real = None if valid is None else int(rows * valid)
    x, identity, up = _inputs(ours, rows, dtype, real)
    x, identity = x.requires_grad_(), identity.requires_grad_()
    rows_of = padding.batch_rows({rows: torch.tensor(real)}) if real else warnings.catch_warnings()
    with warnings.catch_warnings(), rows_of:
        warnings.simplefilter("error", kernels.KernelFallbackWarning)
        y = ours(x, identity)
        forward = list(launched)
        y.backward(up)
    assert forward == ["statistics", "normalize"] and launched[2:] == ["grad_sums", "grad_input"]
    want = _reference(ref, x, identity, up, real)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    for name, got, w in zip(("out", "x", "identity", "weight", "bias"),
                            (y, x.grad, identity.grad, ours.weight.grad, ours.bias.grad), want, strict=True):
        torch.testing.assert_close(got.detach().double(), w, rtol=tol, atol=tol * float(w.abs().max()), msg=name)
    for name in ("running_mean", "running_var"):
        torch.testing.assert_close(getattr(ours, name).double(), getattr(ref, name), rtol=tol, atol=tol, msg=name)
    assert int(ours.num_batches_tracked) == int(ref.num_batches_tracked) == 1


def test_bf16_rows_in_training_stay_within_a_rounding_of_torchs(launched):
    """bf16 rows (float32 parameters, as under autocast): the statistics in float32, the sum converted once to bf16
    (the interpreter truncates: under an ulp, 2^-7 of the value), against the float64 definition on the same bf16
    inputs; the gradients (bf16 for ``x`` and the identity) within a few bf16 ulps of the largest."""
    ours, ref = _pair(70, torch.bfloat16)
    x, identity, up = _inputs(ours, 301, torch.bfloat16)
    x, identity = x.requires_grad_(), identity.requires_grad_()
    y = ours(x, identity)
    y.backward(up)
    want = _reference(ref, x, identity, up)
    assert y.dtype == x.grad.dtype == identity.grad.dtype == torch.bfloat16
    torch.testing.assert_close(y.double(), want[0], rtol=8e-3, atol=1e-5)
    for name, got, w in zip(("x", "identity"), (x.grad, identity.grad), want[1:3], strict=True):
        torch.testing.assert_close(got.double(), w, rtol=8e-3, atol=2e-2 * float(w.abs().max()), msg=name)


def test_training_is_opt_in_and_eval_a_cuda_default(monkeypatch):
    """On CUDA tensors (a device name: nothing runs) with ``POINTGEOPE_KERNELS`` unset the eval kernel runs and the
    training one does not (it waits for a GPU's timing); with ``triton`` both do, with ``torch`` neither."""
    cuda = torch.device("cuda")
    for path, train, evaluated in ((None, False, True), ("triton", True, True), ("torch", False, False)):
        if path is None:
            monkeypatch.delenv("POINTGEOPE_KERNELS", raising=False)
        else:
            monkeypatch.setenv("POINTGEOPE_KERNELS", path)
        imports = kernels.triton_imports()
        assert residual_norm.KERNEL.enabled(cuda) == (train and imports), path
        assert residual_norm.EVAL_KERNEL.enabled(cuda) == (evaluated and imports), path
    assert residual_norm.KERNEL.cuda_default is False and residual_norm.EVAL_KERNEL.cuda_default is True


def test_info_check_has_the_training_rows(launched):
    """``info --check``'s training rows: float32, bfloat16 and float32 in a padded batch, two launches each way,
    within their tolerance of torch's path."""
    from pointgeope.model.norm_check import residual_cases

    cases = residual_cases(True, torch.device("cpu"), 96, 6)
    assert [c.label for c in cases] == ["fwd+bwd float32", "fwd+bwd bfloat16", "fwd+bwd float32 padded"]
    for case in cases:
        launched.clear()
        got = case.run()
        assert launched == ["statistics", "normalize", "grad_sums", "grad_input"]
        diff, _ = case.compare(got, case.reference())
        assert diff <= case.tolerance


@pytest.mark.parametrize("train", [True, False])
def test_a_backward_kernel_that_fails_falls_back_to_torchs_gradients(launched, kernel_failures_forgotten, train):
    """The backward's kernels failing (an injected compiler error) after a forward on the kernels: one
    ``KernelFallbackWarning`` naming the kernel, and the gradients of torch's path on the forward's statistics
    (training: the batch's again; eval: the running buffers the forward stored), the definition's."""
    ours, ref = _pair(70, torch.float64)
    ours.train(train), ref.train(train)
    x, identity, up = _inputs(ours, 301, torch.float64)
    if not train:                       # eval: the kink margin of the running buffers' sums, not the batch's
        pre = torch.nn.functional.batch_norm(x, ours.running_mean, ours.running_var, ours.weight, ours.bias, False,
                                             0.0, ours.eps).detach() + identity
        identity = torch.where(pre.abs() < 0.05, identity + torch.where(pre >= 0, 0.1, -0.1), identity)
    x, identity = x.requires_grad_(), identity.requires_grad_()

    def broken(*args, **kwargs):
        raise RuntimeError("ptxas fatal (injected)")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(residual_norm, "_backward", broken)
        y = ours(x, identity)
        with pytest.warns(kernels.KernelFallbackWarning, match="batch_norm_add_relu"):
            y.backward(up)
    name = "batch_norm_add_relu" if train else "batch_norm_add_relu_eval"
    assert launched == (["statistics", "normalize"] if train else ["normalize"]) and name in kernels.failures()
    want = _reference(ref, x, identity, up)
    for label, got, w in zip(("out", "x", "identity", "weight", "bias"),
                             (y, x.grad, identity.grad, ours.weight.grad, ours.bias.grad), want, strict=True):
        torch.testing.assert_close(got.detach(), w, rtol=1e-12, atol=1e-12 * float(w.abs().max()), msg=label)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("nan_in", ["x", "identity"])
@pytest.mark.parametrize("train", [True, False])
def test_a_nan_stays_nan_through_the_tail_as_torchs(launched, dtype, nan_in, train):
    """torch's ``relu(bn(x) + identity)`` keeps a NaN of ``x`` or of the identity NaN (``relu(NaN)`` is NaN; in
    training a NaN of ``x`` spoils its channel's statistics, so the whole channel and its running buffers), and its
    backward passes the gradient at a NaN output (``threshold_backward`` zeroes it where ``out <= 0``, false for
    NaN). The kernels (forward and backward, no fallback) give the same NaNs, values and gradients as torch's modules
    in float64."""
    ours, ref = _pair(3, dtype)
    ours.train(train), ref.train(train)
    x = torch.tensor([[1.0, 1.0, 2.0], [1.0, 2.0, 3.0], [0.5, -1.0, -2.0], [-0.7, 0.3, 0.9]], dtype=torch.float64)
    identity = torch.tensor([[0.3, -3.0, 0.2], [-0.1, 0.4, 0.5], [2.0, 0.1, 0.1], [0.6, -0.2, 1.5]],
                            dtype=torch.float64)
    (x if nan_in == "x" else identity)[1, 0] = float("nan")
    up = torch.arange(1.0, 13.0, dtype=torch.float64).reshape(4, 3)
    xs, ids = (t.to(dtype).requires_grad_() for t in (x.clone(), identity.clone()))
    with warnings.catch_warnings():
        warnings.simplefilter("error", kernels.KernelFallbackWarning)
        y = ours(xs, ids)
        y.backward(up.to(dtype))
    assert launched[-3:] == ["normalize", "grad_sums", "grad_input"]
    x64, id64 = (t.detach().clone().requires_grad_() for t in (x, identity))
    want = torch.relu(ref(x64) + id64)
    want.backward(up)
    assert y.isnan().any()
    tol = {torch.float64: 1e-12, torch.float32: 1e-5, torch.bfloat16: 2e-2}[dtype]
    for got, ref_t in ((y, want), (xs.grad, x64.grad), (ids.grad, id64.grad), (ours.weight.grad, ref.weight.grad),
                       (ours.bias.grad, ref.bias.grad), (ours.running_mean, ref.running_mean),
                       (ours.running_var, ref.running_var)):
        torch.testing.assert_close(got.detach().double(), ref_t.detach(), rtol=tol, atol=tol * 10, equal_nan=True)


class _Ops(TorchDispatchMode):
    """The aten ops dispatched outside Triton's launches (the interpreter moves a launch's arguments with ops of
    its own, which a GPU does not run)."""

    def __init__(self, patch: pytest.MonkeyPatch):
        super().__init__()
        from triton.runtime.interpreter import InterpretedFunction

        self.names, self.inside, run = [], 0, InterpretedFunction.run

        def counted(fn, *args, **kwargs):
            self.inside += 1
            try:
                return run(fn, *args, **kwargs)
            finally:
                self.inside -= 1
        patch.setattr(InterpretedFunction, "run", counted)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.inside:
            self.names.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("train", [True, False])
def test_the_backward_is_the_two_kernels_alone(launched, train):
    """The ReLU's mask is applied inside ``grad_sums`` and ``grad_input`` (from the saved output), and
    ``grad_input`` stores the identity's gradient: the backward launches those two kernels and no torch op but
    allocations and views (no ``where`` pass of its own), training and eval."""
    ours, _ = _pair(70, torch.float32)
    ours.train(train)
    x, identity, up = _inputs(ours, 301, torch.float32)
    y = ours(x.requires_grad_(), identity.requires_grad_())
    launched.clear()
    with pytest.MonkeyPatch.context() as patch, _Ops(patch) as ops:
        y.backward(up)
    assert launched == ["grad_sums", "grad_input"]
    assert set(ops.names) <= {"empty_like", "empty", "select", "detach"}, ops.names


@pytest.mark.parametrize("which", ["x", "identity"])
def test_one_input_alone_takes_its_gradient_from_the_kernels(launched, which):
    """Only ``x`` or only the identity asks for a gradient (the parameters frozen): each gets torch's float64
    gradient; the identity's alone still comes from ``grad_input`` (its store of the masked gradient)."""
    ours, ref = _pair(70, torch.float64)
    ours.weight.requires_grad_(False), ours.bias.requires_grad_(False)
    x, identity, up = _inputs(ours, 301, torch.float64)
    wanted = x if which == "x" else identity
    wanted.requires_grad_()
    ours(x, identity).backward(up)
    want = _reference(ref, x, identity, up)[1 if which == "x" else 2]
    assert launched[2:] == ["grad_sums", "grad_input"]
    torch.testing.assert_close(wanted.grad, want, rtol=1e-12, atol=1e-12 * float(want.abs().max()))
    assert (identity if which == "x" else x).grad is None
