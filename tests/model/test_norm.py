"""Tests of pointgeope/model/norm.py (and its kernels, triton_norm.py) on CPU tensors under Triton's interpreter,
against torch's ``nn.BatchNorm1d`` followed by ``relu`` as the independent reference: outputs, running buffers,
gradients of the input and the parameters, training and eval mode, float32, bfloat16 rows with float32
statistics, float64 (``gradcheck``), row counts that are no multiple of a tile, widths that are no power of two
(the torch path, the switch and the fallback: ``test_norm_paths.py``; the modules' layout: ``test_norm_modules.py``)."""
from __future__ import annotations

import contextlib
import copy
import warnings

import pytest
import torch

pytest.importorskip("triton")          # imported before TRITON_INTERPRET is set (test_fused_attention.py says why)
from pointgeope.model import kernels, norm, padding, residual_norm
from pointgeope.model.norm import BatchNormReLU

BF16_RTOL = 2 ** -7                    # two roundings to bfloat16 (the output, and the reference's cast)


def _pair(channels: int, dtype=torch.float32, momentum=0.1, seed=0,
          cls: type[norm.BatchNorm] = BatchNormReLU) -> tuple[norm.BatchNorm, torch.nn.BatchNorm1d]:
    """The module under test (``cls``: with the ReLU, or the plain ``norm.BatchNorm``) and torch's
    ``BatchNorm1d`` with the same random parameters and buffers, float64 for float64 rows ``dtype``, else
    float32 (bfloat16 rows: autocast's case)."""
    g = torch.Generator().manual_seed(seed)
    ours = cls(channels, momentum=momentum)
    ours = ours.double() if dtype == torch.float64 else ours
    with torch.no_grad():
        ours.weight.copy_(torch.rand(channels, generator=g) + 0.5)
        ours.bias.copy_(torch.randn(channels, generator=g))
        ours.running_mean.copy_(torch.randn(channels, generator=g))
        ours.running_var.copy_(torch.rand(channels, generator=g) + 0.5)
    ref = torch.nn.BatchNorm1d(channels, momentum=momentum).to(ours.weight.dtype)
    ref.load_state_dict(ours.state_dict())
    return ours, ref


def _run(module, x, g, relu=False, valid: int | None = None):
    """Output and ``(dx, dw, db)`` of ``module(x)`` (``relu`` after it: the reference) against ``g``; inside
    ``padding.batch_rows`` (the first ``valid`` rows real) when ``valid`` is given."""
    module.weight.grad = module.bias.grad = None
    x = x.detach().requires_grad_()
    with padding.batch_rows({x.shape[0]: torch.tensor(valid)}) if valid is not None else contextlib.nullcontext():
        y = module(x)
    y = torch.relu(y) if relu else y
    y.backward(g.to(y.dtype))
    return y.detach(), x.grad, module.weight.grad, module.bias.grad


@pytest.mark.parametrize("rows, channels, train", [(130, 3, True), (77, 37, True), (1100, 96, True),
                                                   (130, 3, False), (77, 37, False), (77, 96, False)])
def test_float32_matches_batch_norm_and_relu(interpreted, rows, channels, train):
    """Outputs and gradients, two steps in training (the running buffers move twice), one in eval (they are the
    statistics, and stay): 37 and 96 channels are no power of two (96: two channel tiles), 77 and 1100 rows no
    multiple of a tile, 1100 x 96 has more partials (35) than the finishing kernel takes a step (32): a
    training case (eval reduces no rows: its 96 channels on 77 rows)."""
    ours, ref = _pair(channels)
    ours.train(train), ref.train(train)
    g = torch.Generator().manual_seed(1)
    for _ in range(2 if train else 1):
        x = torch.randn(rows, channels, generator=g) * 3 + 1
        grad = torch.randn(rows, channels, generator=g)
        for got, want in zip(_run(ours, x, grad), _run(ref, x, grad, relu=True), strict=True):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4 * max(1.0, float(want.abs().max())))
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        torch.testing.assert_close(getattr(ours, name), getattr(ref, name), rtol=1e-6, atol=1e-6)
    assert int(ours.num_batches_tracked) == (2 if train else 0)


@pytest.mark.parametrize("train", [True, False])
def test_bfloat16_rows_keep_float32_statistics(interpreted, train):
    """bfloat16 rows with float32 parameters (autocast's case): the output and ``dx`` are torch's float32
    batch norm of the same values rounded once to bfloat16; the statistics, running buffers and parameter
    gradients are float32 sums of the same bfloat16 values, as accurate as float32's."""
    rows, channels = 700, 24
    ours, ref = _pair(channels)
    ours.train(train), ref.train(train)
    g = torch.Generator().manual_seed(2)
    x = (torch.randn(rows, channels, generator=g) * 2 - 0.5).bfloat16()
    grad = torch.randn(rows, channels, generator=g).bfloat16()
    y, dx, dw, db = _run(ours, x, grad)
    y_ref, dx_ref, dw_ref, db_ref = _run(ref, x.float(), grad.float(), relu=True)
    assert y.dtype == dx.dtype == torch.bfloat16 and dw.dtype == db.dtype == torch.float32
    torch.testing.assert_close(y.float(), y_ref, rtol=BF16_RTOL, atol=1e-2)
    torch.testing.assert_close(dx.float(), dx_ref, rtol=BF16_RTOL, atol=1e-2 * float(dx_ref.abs().max()))
    torch.testing.assert_close(dw, dw_ref, rtol=1e-5, atol=1e-4 * float(dw_ref.abs().max()))
    torch.testing.assert_close(db, db_ref, rtol=1e-5, atol=1e-4 * float(db_ref.abs().max()))
    torch.testing.assert_close(ours.running_mean, ref.running_mean, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ours.running_var, ref.running_var, rtol=1e-6, atol=1e-6)


def test_statistics_of_rows_far_from_zero(interpreted):
    """Rows of mean 1000 and standard deviation 0.5 in float32: the variance by Chan's merge of per-tile
    centred sums is float32-accurate where ``E[x^2] - E[x]^2`` would lose it (1000^2 x 6e-8 = 0.06 of 0.25);
    the reference is float64. Run with 3 partials of several tiles each (both merges)."""
    interpreted.setattr(norm, "MAX_PARTIALS", 3)
    g = torch.Generator().manual_seed(3)
    x = (1000 + 0.5 * torch.randn(3000, 5, generator=g, dtype=torch.float64))
    ours, ref = _pair(5, momentum=1.0)                 # the running buffers become the batch's statistics
    ref = ref.double()
    ours(x.float())
    ref(x)
    torch.testing.assert_close(ours.running_mean.double(), ref.running_mean, rtol=1e-7, atol=0)
    torch.testing.assert_close(ours.running_var.double(), ref.running_var, rtol=2e-4, atol=0)


def test_momentum_none_is_a_cumulative_average(interpreted):
    ours, ref = _pair(6, momentum=None)
    g = torch.Generator().manual_seed(4)
    for _ in range(3):
        x = torch.randn(50, 6, generator=g) + 2
        ours(x), ref(x)
    assert int(ours.num_batches_tracked) == 3
    torch.testing.assert_close(ours.running_mean, ref.running_mean, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(ours.running_var, ref.running_var, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("train", [True, False])
def test_a_nan_stays_nan_through_the_relu_as_torch_s(interpreted, dtype, train):
    """``relu(NaN)`` is NaN in torch: the kernel's ReLU keeps it, so a NaN input is not turned into zeros that
    hide it (in eval the NaN row's channel, in training the whole channel
    whose statistics it spoils). The reference: torch's module then ``torch.relu``, NaN for NaN."""
    ours, ref = _pair(3, dtype)
    ours.train(train), ref.train(train)
    x = torch.tensor([[float("nan"), 1.0, 2.0], [1.0, 2.0, 3.0], [0.5, -1.0, -2.0]], dtype=dtype)
    with torch.no_grad():
        y, want = ours(x), torch.relu(ref(x.to(ref.weight.dtype))).to(dtype)
    assert y.isnan().any() and torch.equal(y.isnan(), want.isnan())
    torch.testing.assert_close(y, want, rtol=BF16_RTOL, atol=1e-6, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("train", [True, False])
def test_the_relus_gradient_at_a_nan_is_torchs(interpreted, dtype, train):
    """torch's ReLU backward (``threshold_backward``) zeroes the gradient where the output is ``<= 0`` only: at a
    NaN output it passes it. The kernels' backward (``grad_sums``, ``grad_input``) gives the same ``dx``, ``dw``,
    ``db`` as torch's module and ``torch.relu`` by autograd, NaN where torch's are NaN (training: the NaN's channel)."""
    ours, ref = _pair(3, dtype)
    ref = ref.double()
    ours.train(train), ref.train(train)
    x = torch.tensor([[1.0, 1.0, 2.0], [1.0, 2.0, 3.0], [0.5, -1.0, -2.0], [-0.7, 0.3, 0.9]], dtype=torch.float64)
    x[1, 0] = float("nan")
    up = torch.arange(1.0, 13.0, dtype=torch.float64).reshape(4, 3)
    xs, x64 = x.to(dtype).clone().requires_grad_(), x.clone().requires_grad_()
    with warnings.catch_warnings():
        warnings.simplefilter("error", kernels.KernelFallbackWarning)
        ours(xs).backward(up.to(dtype))
    torch.relu(ref(x64)).backward(up)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    for got, want in ((xs.grad, x64.grad), (ours.weight.grad, ref.weight.grad), (ours.bias.grad, ref.bias.grad)):
        torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol * 10, equal_nan=True)


@pytest.mark.parametrize("train", [True, False])
def test_float64_gradcheck(interpreted, train):
    """``gradcheck`` of ``x``, ``w``, ``b`` in float64 (rows drawn away from the ReLU's kink)."""
    g = torch.Generator().manual_seed(6)          # (a draw with no pre-activation within 1e-3 of the kink)
    # 4 rows: one masked tile of rows (BLOCK_R 256) and of 3 channels (BLOCK_C 4), as 9 x 5 and 6 x 3 were;
    # gradcheck's interpreted launches grow with the elements (2 per input, 1 per output)
    x = torch.randn(4, 3, generator=g, dtype=torch.float64)
    w = (torch.rand(3, generator=g, dtype=torch.float64) + 0.5)
    b = torch.randn(3, generator=g, dtype=torch.float64)
    rm, rv = torch.randn(3, generator=g, dtype=torch.float64), torch.rand(3, generator=g, dtype=torch.float64) + 0.5
    with torch.no_grad():
        pre = torch.nn.functional.batch_norm(x, None if train else rm, None if train else rv, w, b, train)
    assert pre.abs().min() > 1e-3 and 0 < (pre > 0).sum() < pre.numel()       # the ReLU passes some, not all

    def fn(a, wt, bs):
        return norm.batch_norm_relu(a, wt, bs, None if train else rm, None if train else rv, train)
    inputs = [t.clone().requires_grad_() for t in (x, w, b)]
    assert torch.autograd.gradcheck(fn, inputs)
    torch.testing.assert_close(fn(*inputs), torch.relu(pre), rtol=1e-12, atol=1e-12)


# the two fused norms: their kernel's entry, their module, whether torch's reference takes a ReLU after it
NORMS = [pytest.param("KERNEL", BatchNormReLU, True, id="relu"),
         pytest.param("PLAIN_KERNEL", norm.BatchNorm, False, id="plain")]


def test_every_norm_of_the_network_runs_fused_and_equals_torchs(interpreted_cpu):
    """A small network (rpe: the blocks', transitions', head's and attention MLPs' norms, over points and over
    pairs, and the blocks' third norms, without ReLU) on the Triton path, training mode: each ``BatchNormReLU``
    calls the fused op once, each block's third norm (``residual_norm.BatchNormAddReLU``) the fused norm, add and
    ReLU once (opt-in: ``POINTGEOPE_KERNELS=triton`` here), and the logits, gradients and running buffers equal
    those of the same path with torch's batch norms (and relu, and the add) in their place. (The hierarchy's
    k-NN and FPS and the attention's relation and aggregate on torch's path, the same in both runs: their
    interpreted kernels are other tests' subject, and were most of this one's time.)"""
    from pointgeope.model import OpsBackends, PointTransformerSeg, fused_attention
    from tests.model.test_network import TINY, _batch

    for name in ("relation", "aggregate"):
        interpreted_cpu.setattr(fused_attention.KERNELS[name], "enabled", lambda device: False)

    torch.manual_seed(0)
    model = PointTransformerSeg(pe="rpe", backends=OpsBackends(knn="torch", fps="torch"), **TINY).train()
    with torch.no_grad():       # random affine maps: at the init's bias 0, rows at their channel's mean (in
        for m in model.modules():   # a tiny cloud whose kNN is the whole cloud, every self pair) sit on the
            if isinstance(m, BatchNormReLU):     # ReLU's kink, where rounding alone decides the mask
                m.weight.uniform_(0.5, 1.5), m.bias.uniform_(-0.5, 0.5)
    twin = copy.deepcopy(model)
    coord, feat, offset = _batch()
    calls = {True: [], False: []}

    def counted(relu, fused):
        return lambda *args: calls[relu].append(args[0].shape) or fused(*args)
    runs = []
    for net, fn, tail in ((model, counted(True, norm.KERNEL.triton), counted(False, residual_norm.KERNEL.triton)),
                          (twin, norm.reference, residual_norm.reference)):
        interpreted_cpu.setattr(norm.KERNEL, "triton", fn)
        interpreted_cpu.setattr(residual_norm.KERNEL, "triton", tail)
        logits = net(coord, feat, offset)
        logits.square().mean().backward()
        runs.append((logits.detach(), {n: p.grad for n, p in net.named_parameters()},
                     {n: b for n, b in net.named_buffers() if "running" in n}))
    assert len(calls[True]) == sum(isinstance(m, BatchNormReLU) for m in model.modules()) > 30
    assert len(calls[False]) == sum(isinstance(m, residual_norm.BatchNormAddReLU) for m in model.modules()) > 3
    assert {shape[1] for shape in calls[True]} >= {3, 2, 16, 24, 32}   # pairs (rpe's 3, groups 2..4) and points
    (logits, grads, buffers), (logits_t, grads_t, buffers_t) = runs
    torch.testing.assert_close(logits, logits_t, rtol=1e-4, atol=1e-4)
    scale = max(float(g.abs().max()) for g in grads_t.values())
    for name, grad in grads.items():     # (the biases before a norm have zero gradients: rounding noise)
        torch.testing.assert_close(grad, grads_t[name], rtol=1e-3, atol=1e-5 * scale, msg=name)
    for name, value in buffers.items():
        torch.testing.assert_close(value, buffers_t[name], rtol=1e-4, atol=1e-5, msg=name)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("kernel, cls, relu", NORMS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows, channels", [(320_000, 64), (100_003, 3), (50_000, 96)])
def test_compiled_kernels_on_cuda_match_torchs_batch_norm(monkeypatch, kernel_failures_forgotten, dtype, rows,
                                                          channels, kernel, cls, relu):
    """The kernels compiled for the GPU (``POINTGEOPE_KERNELS=triton``: opt-in kernels too), training then
    eval: outputs, gradients and running buffers against torch's float32 ``BatchNorm1d`` (+ ``relu`` for
    ``BatchNormReLU``; the plain norm has no kink to keep the rows off) of the same (rounded) rows; the
    kernel ran both times and did not fall back."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setenv("POINTGEOPE_KERNELS", "triton")
    entry, calls = getattr(norm, kernel), []
    fused = entry.triton
    monkeypatch.setattr(entry, "triton", lambda *a: calls.append(1) or fused(*a))
    ours, ref = (m.cuda() for m in _pair(channels, cls=cls))
    g = torch.Generator(device="cuda").manual_seed(6)
    tol = dict(rtol=BF16_RTOL, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-5, atol=1e-4)
    for train in (True, False):
        ours.train(train), ref.train(train)
        x = torch.randn(rows, channels, generator=g, device="cuda") * 3 + 1
        if relu:
            x = _off_the_kink(x, ref, train)
            assert _pre_activation(x.to(dtype), ref, train).abs().min() > 1e-2
        x = x.to(dtype)
        grad = torch.randn(rows, channels, generator=g, device="cuda").to(dtype)
        got, want = _run(ours, x, grad), _run(ref, x.float(), grad.float(), relu=relu)
        assert got[0].dtype == dtype
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a.float(), b, rtol=tol["rtol"],
                                       atol=tol["atol"] * max(1.0, float(b.abs().max())))
        torch.testing.assert_close(ours.running_var, ref.running_var, rtol=1e-5, atol=1e-6)
    assert len(calls) == 2 and entry.name not in kernels.failures()


def _pre_activation(x, bn, batch: bool):
    """``bn(x)`` before the ReLU, in float64, with the batch's statistics or ``bn``'s running ones."""
    xd = x.double()
    mean, var = ((xd.mean(0), xd.var(0, unbiased=False)) if batch
                 else (bn.running_mean.double(), bn.running_var.double()))
    return (xd - mean) * (bn.weight.double() / (var + bn.eps).sqrt()) + bn.bias.double()


def _off_the_kink(x, bn, batch: bool, margin: float = 0.05):
    """``x`` with every value whose pre-activation lies within ``margin`` of the ReLU's kink moved ``2 margin``
    further along its side: on millions of values a few would otherwise sit where float32 rounding decides
    the mask, and compare two roundings instead of two batch norms."""
    pre = _pre_activation(x, bn, batch)
    var = x.double().var(0, unbiased=False) if batch else bn.running_var.double()
    scale = bn.weight.double() / (var + bn.eps).sqrt()
    step = torch.where(pre >= 0, 2 * margin, -2 * margin) / scale
    return torch.where(pre.abs() < margin, x.double() + step, x.double()).float()


def test_a_padded_batch_takes_the_prefix_statistics_on_the_kernel_path_too(interpreted):
    """With the Triton kernel switched on, a ``BatchNormReLU`` in training inside ``padding.batch_rows`` runs the
    kernel with the real rows' statistics (what a CUDA graph's step needs): ``relu(BatchNorm1d)`` of those rows,
    and every row's output and gradient (the dummy rows' too) those of the torch ops' prefix batch norm
    (float64); with ``momentum=None`` (a cumulative step, a tensor) the torch ops run."""
    from pointgeope.model import padding

    calls, fused = [], norm.KERNEL.triton
    interpreted.setattr(norm.KERNEL, "triton", lambda *a: calls.append(1) or fused(*a))
    g = torch.Generator().manual_seed(5)
    x = (torch.randn(70, 6, generator=g, dtype=torch.float64) * 2 + 1).requires_grad_()
    up = torch.randn(70, 6, generator=g, dtype=torch.float64)
    ours, prefix = BatchNormReLU(6).double().train(), BatchNormReLU(6).double().train()
    theirs = torch.nn.BatchNorm1d(6).double().train()
    with torch.no_grad():
        for m in (ours, prefix, theirs):
            m.weight.copy_(torch.linspace(0.5, 1.5, 6)), m.bias.copy_(torch.linspace(-0.5, 0.5, 6))
    with padding.batch_rows({70: torch.tensor(41)}):
        got = ours(x)
        want = torch.relu(norm.prefix_batch_norm(x, torch.tensor(41), prefix.weight, prefix.bias, prefix.running_mean,
                                                 prefix.running_var, 0.1, prefix.eps))
    assert calls == [1]
    torch.testing.assert_close(got[:41], torch.relu(theirs(x[:41])), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
    for a, b in zip(torch.autograd.grad((got * up).sum(), (x, ours.weight, ours.bias)),
                    torch.autograd.grad((want * up).sum(), (x, prefix.weight, prefix.bias)), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(ours.running_var, theirs.running_var, rtol=1e-12, atol=1e-12)
    cumulative = BatchNormReLU(6, momentum=None).double().train()
    with padding.batch_rows({70: torch.tensor(41)}):
        cumulative(x)
    assert calls == [1]
    ours(x)
    assert calls == [1, 1]
