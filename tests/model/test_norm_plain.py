"""Tests of the plain batch norm (``norm.BatchNorm``, no ReLU: the PTv1 block's third norm) on the Triton kernels
of triton_norm.py (their ``RELU`` flag off), on CPU tensors under Triton's interpreter.

The reference is written here from the definition, in float64: over the first ``n`` rows (all of them, or a
padded batch's real prefix) ``mean = sum x / n``, ``var = sum (x - mean)^2 / n`` (biased), every row
``y = w (x - mean) / sqrt(var + eps) + b``; the running buffers move as ``(1 - m) r + m s`` towards the mean and
the unbiased ``var n / (n - 1)``; in eval the running buffers are the statistics; the gradients are autograd's
through that expression. Also: torch's ``BatchNorm1d`` and the torch-ops prefix batch norm, ``gradcheck``, the
fallback, and a padded PTv1 step on the kernels against the unpadded one (the torch path and the compiled
kernels on CUDA: test_norm.py's tests, parametrised by the norm)."""
from __future__ import annotations

import contextlib
import copy

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("triton")          # imported before TRITON_INTERPRET is set (test_fused_attention.py says why)
from pointgeope.model import kernels, norm, padding
from pointgeope.model.kernel_choice import forced
from tests.model.test_norm import _pair, _run
from tests.model.test_norm_paths import _failing

EPS, MOMENTUM = 1e-5, 0.1              # the modules' (test_norm.py's ``_pair``: torch's defaults)
BF16_ROUNDING = 2 ** -7                # one conversion to bfloat16 (8 significant bits): Triton's interpreter
                                       # truncates (under one ulp), a GPU rounds to nearest (half of it)


def _plain(channels: int, dtype: torch.dtype = torch.float32, **kw) -> tuple[norm.BatchNorm, torch.nn.BatchNorm1d]:
    """test_norm.py's ``_pair`` (random parameters and running buffers, torch's twin) of the plain norm."""
    return _pair(channels, dtype, cls=norm.BatchNorm, **kw)


def _definition(x, g, w, b, rm, rv, train: bool, n: int):
    """The float64 reference (module docstring): ``(y, dx, dw, db, running_mean, running_var)``."""
    xd = x.detach().double().requires_grad_()
    wd, bd = w.detach().double().requires_grad_(), b.detach().double().requires_grad_()
    if train:
        mean = xd[:n].sum(0) / n
        var = (xd[:n] - mean).square().sum(0) / n
        rm = (1 - MOMENTUM) * rm.double() + MOMENTUM * mean.detach()
        rv = (1 - MOMENTUM) * rv.double() + MOMENTUM * var.detach() * n / (n - 1)
    else:
        mean = rm = rm.double()
        var = rv = rv.double()
    y = (xd - mean) / torch.sqrt(var + EPS) * wd + bd
    return (y.detach(), *torch.autograd.grad(y, (xd, wd, bd), g.double()), rm, rv)


def _spied(patch) -> list:
    """The plain kernel's Triton calls, recorded; the torch ops' prefix batch norm fails the test if called."""
    calls, fused = [], norm.PLAIN_KERNEL.triton
    patch.setattr(norm.PLAIN_KERNEL, "triton", lambda *a: calls.append(a[0].shape) or fused(*a))
    patch.setattr(norm, "prefix_batch_norm", lambda *a: pytest.fail("the torch ops' prefix batch norm ran"))
    return calls


def _close(got, want, dtype, name):
    """float64: to rounding; float32: float32 sums; bf16 rows (``y``, ``dx``): one rounding to bfloat16 of a
    float32 value; the float32 parameter gradients and buffers of bf16 rows: float32 sums."""
    scale = float(want.abs().max())
    if dtype == torch.float64:
        tol = dict(rtol=1e-10, atol=1e-12 * scale)
    elif dtype == torch.bfloat16 and name in ("y", "dx"):
        tol = dict(rtol=BF16_ROUNDING, atol=1e-5 * scale)
    else:
        tol = dict(rtol=1e-5, atol=1e-5 * scale)
    torch.testing.assert_close(got.double(), want, **tol, msg=lambda m: f"{name} ({dtype}): {m}")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("train", [True, False])
def test_the_plain_kernel_is_the_definition(interpreted, dtype, padded, train):
    """Two steps in training (the running buffers move twice), one in eval (they stay: the second would repeat
    it) of 300 x 37 rows, 211 of them real when padded (in eval a padded batch takes the running statistics on
    every row): outputs in ``x``'s dtype, ``dx``, ``dw``, ``db``, the running buffers and
    ``num_batches_tracked``; the kernel ran, the torch ops did not."""
    rows, channels, n = 300, 37, 211 if padded and train else 300
    calls = _spied(interpreted)
    module = _plain(channels, dtype)[0].train(train)
    rm, rv = module.running_mean.clone(), module.running_var.clone()
    gen = torch.Generator().manual_seed(1)
    steps = 2 if train else 1
    for _ in range(steps):
        x = (torch.randn(rows, channels, generator=gen, dtype=torch.float64) * 3 + 1).to(dtype)
        g = torch.randn(rows, channels, generator=gen, dtype=torch.float64).to(dtype)
        got = _run(module, x, g, valid=211 if padded else None)
        *want, rm, rv = _definition(x, g, module.weight, module.bias, rm, rv, train, n)
        assert got[0].dtype == got[1].dtype == dtype and got[2].dtype == module.weight.dtype
        for name, a, b in zip(("y", "dx", "dw", "db"), got, want, strict=True):
            _close(a, b, dtype, name)
        _close(module.running_mean, rm, dtype, "running_mean")
        _close(module.running_var, rv, dtype, "running_var")
    assert len(calls) == steps and int(module.num_batches_tracked) == (2 if train else 0)


@pytest.mark.parametrize("padded", [False, True])
def test_many_partials_and_two_channel_tiles(interpreted, padded):
    """1100 x 96 float32 rows (two channel tiles, 35 partials of 32 rows: more than a finishing step takes), 700
    real when padded: the real rows' statistics wherever they end within a partial."""
    calls = _spied(interpreted)
    module = _plain(96, seed=2)[0]
    gen = torch.Generator().manual_seed(3)
    x, g = torch.randn(1100, 96, generator=gen) * 2 - 1, torch.randn(1100, 96, generator=gen)
    rm, rv = module.running_mean.clone(), module.running_var.clone()
    got = _run(module, x, g, valid=700 if padded else None)
    *want, rm, rv = _definition(x, g, module.weight, module.bias, rm, rv, True, 700 if padded else 1100)
    for name, a, b in zip(("y", "dx", "dw", "db"), got, want, strict=True):
        _close(a, b, torch.float32, name)
    _close(module.running_var, rv, torch.float32, "running_var")
    assert len(calls) == 1


@pytest.mark.parametrize("train", [True, False])
def test_torchs_batch_norm_1d_unpadded(interpreted, train):
    """Against torch's own ``BatchNorm1d`` (same parameters and buffers), float32, three steps: outputs,
    gradients, running buffers, ``num_batches_tracked``; and ``momentum=None`` (a cumulative average)."""
    for momentum in (MOMENTUM, None):
        ours, ref = _plain(10, momentum=momentum)
        ours.train(train), ref.train(train)
        gen = torch.Generator().manual_seed(4)
        for _ in range(3):
            x, g = torch.randn(120, 10, generator=gen) + 2, torch.randn(120, 10, generator=gen)
            for a, b in zip(_run(ours, x, g), _run(ref, x, g), strict=True):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5 * float(b.abs().max()))
        for name in ("running_mean", "running_var", "num_batches_tracked"):
            torch.testing.assert_close(getattr(ours, name), getattr(ref, name), rtol=1e-6, atol=1e-6)


def test_the_torch_ops_prefix_batch_norm_padded(interpreted):
    """Padded (90 rows, 53 real), float64: every row's output and gradient, and the running buffers, equal those
    of the torch ops' prefix batch norm that ran there before; ``momentum=None`` still takes the torch ops."""
    fused = _plain(6, torch.float64)[0]
    prefix = copy.deepcopy(fused)
    gen = torch.Generator().manual_seed(5)
    x, g = (torch.randn(90, 6, generator=gen, dtype=torch.float64) for _ in range(2))
    got = _run(fused, x, g, valid=53)
    with forced("torch"):
        want = _run(prefix, x, g, valid=53)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        torch.testing.assert_close(getattr(fused, name), getattr(prefix, name), rtol=1e-12, atol=0)
    calls, ops = [], norm.prefix_batch_norm
    interpreted.setattr(norm, "prefix_batch_norm", lambda *a: calls.append(1) or ops(*a))
    cumulative = _plain(6, torch.float64, momentum=None)[0]
    _run(cumulative, x, g, valid=53)
    assert calls == [1]


@pytest.mark.parametrize("train, padded", [(True, False), (True, True), (False, False)])
def test_float64_gradcheck(interpreted, train, padded):
    """``gradcheck`` of ``x``, ``w``, ``b`` through ``norm.batch_norm`` (no ReLU: no kink to avoid)."""
    gen = torch.Generator().manual_seed(6)
    # 4 rows (3 of them real when padded): one masked tile of rows (BLOCK_R 256) and of 3 channels (BLOCK_C 4), as
    # 9 x 5 and 6 x 3 were; gradcheck's interpreted launches grow with the elements (2 per input, 1 per output)
    x = torch.randn(4, 3, generator=gen, dtype=torch.float64)
    w, b = torch.rand(3, generator=gen, dtype=torch.float64) + 0.5, torch.randn(3, generator=gen, dtype=torch.float64)
    rm, rv = torch.randn(3, generator=gen, dtype=torch.float64), torch.rand(3, generator=gen, dtype=torch.float64) + 0.5
    valid = torch.tensor(3) if padded else None

    def fn(a, wt, bs):
        return norm.batch_norm(a, wt, bs, None if train else rm, None if train else rv, train, valid=valid)
    assert torch.autograd.gradcheck(fn, [t.clone().requires_grad_() for t in (x, w, b)])


class _PlainFails:
    """Stands in for a kernel with the ``RELU`` flag: its plain specialisation fails to compile, the ReLU's
    launches (the same function with its flag on)."""

    def __init__(self, kernel):
        self.kernel, self.failing = kernel, _failing()

    def __getitem__(self, grid):
        return lambda *a, **meta: (self.kernel if meta["RELU"] else self.failing)[grid](*a, **meta)


@pytest.mark.parametrize("kernel, train", [("normalize", True), ("grad_input", True), ("grad_input", False)])
def test_a_failing_kernel_falls_back_to_torch_alone(interpreted, kernel, train):
    """The plain specialisation of the forward's last kernel or the backward's fails: one warning naming the
    plain kernel, torch's outputs, gradients and buffers (moved once); the ReLU's kernel is not turned off."""
    k = norm.triton_kernels()
    interpreted.setattr(k, kernel, _PlainFails(getattr(k, kernel)))
    ours, ref = _plain(7)
    ours.train(train), ref.train(train)
    x, g = torch.randn(40, 7) * 2, torch.randn(40, 7)
    with pytest.warns(kernels.KernelFallbackWarning, match="Triton kernel batch_norm failed"):
        got = _run(ours, x, g)
    for a, b in zip(got, _run(ref, x, g), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    for name in ("running_mean", "running_var"):             # moved once (a float32 rounding apart)
        torch.testing.assert_close(getattr(ours, name), getattr(ref, name), rtol=1e-6, atol=1e-7)
    assert "batch_norm" in kernels.failures() and "batch_norm_relu" not in kernels.failures()
    assert norm.KERNEL.enabled(x.device) and not norm.PLAIN_KERNEL.enabled(x.device)


def cpu_as_cuda(patch) -> None:
    """The kernel switch (``kernels.use_triton``) decides for the two norms' kernels on CPU tensors as it does for
    CUDA ones, so that with ``POINTGEOPE_KERNELS`` unset they run where CUDA's default runs them (here under Triton's
    interpreter): the registry's own rule (``Kernel.enabled``: ``cuda_default``, the switch, failures) decides;
    every other kernel keeps the CPU's torch path."""
    decide, names = kernels.use_triton, {norm.KERNEL.name, norm.PLAIN_KERNEL.name}
    patch.setattr(kernels, "use_triton", lambda name, device, atomics=False: decide(
        name, torch.device("cuda") if name in names else device, atomics))


def test_a_padded_ptv1_step_on_the_kernels_equals_the_unpadded_step(interpreted):
    """float64 PTv1 (rpe), ``POINTGEOPE_KERNELS`` unset and the norms' kernels decided as on CUDA (``cpu_as_cuda``;
    every other op on torch's path). The unpadded step runs every block's third norm on torch's ``BatchNorm1d`` (no
    plain kernel). The padded step (a dummy cloud at every stage) runs every third norm on the plain kernel over
    its real prefix and no torch-ops prefix batch norm, and equals the unpadded step on torch's batch norms (real
    logits, loss, every gradient and running buffer). With ``POINTGEOPE_KERNELS=torch`` the same padded step runs
    the torch ops' prefix batch norm for every norm and no kernel. test_padding.py's network with 8 neighbours at
    every stage and strides of 2 (fewer rows, each norm interpreted: the padded stages of 128, 66 and 35 rows keep
    a dummy cloud and their real prefix ends within a tile), two clouds of 34 and 42 points (8 and 10 at the last
    stage: each keeps at least its 8 neighbours, so no k-NN repeats a point). The unpadded step's forward alone
    runs (its dispatch and logits are checked, its gradients are not: the padded step is compared with
    ``model``'s, on torch's batch norms)."""
    from pointgeope.model import PointTransformerSeg
    from tests.model.test_padding import IGNORE, SMALL, _batch, _padded, assert_same_step

    interpreted.delenv("POINTGEOPE_KERNELS")        # unset: the device's default, CUDA's for the norms' kernels
    cpu_as_cuda(interpreted)
    torch.manual_seed(0)
    model = PointTransformerSeg(pe="rpe", **dict(SMALL, neighbours=(8, 8, 8), strides=(1, 2, 2))).double().train()
    unpadded, twin, control = (copy.deepcopy(model) for _ in range(3))
    coord, feat, offset, label = _batch(sizes=(34, 42))
    h, sizes, prefixes, (pc, pf, po, pl, ph) = _padded(model, coord, feat, offset, label)
    assert h.offsets[-1].tolist() == [8, 18]            # the last stage: 8 and 10 points, each >= its k = 8
    with forced("torch"):
        want = model(coord, feat, offset, hierarchy=h)
        F.cross_entropy(want, label, ignore_index=IGNORE).backward()
    calls = {"prefix": [], "plain": [], "relu": [], "torch": []}
    ops, plain, relu, torch_forward = (norm.prefix_batch_norm, norm.PLAIN_KERNEL.triton, norm.KERNEL.triton,
                                       norm.BatchNorm._torch_forward)
    interpreted.setattr(norm, "prefix_batch_norm", lambda *a: calls["prefix"].append(a[0].shape) or ops(*a))
    interpreted.setattr(norm.PLAIN_KERNEL, "triton", lambda *a: calls["plain"].append(a[8]) or plain(*a))
    interpreted.setattr(norm.KERNEL, "triton", lambda *a: calls["relu"].append(a[8]) or relu(*a))
    interpreted.setattr(norm.BatchNorm, "_torch_forward",
                        lambda m, x, v: calls["torch"].append(v) or torch_forward(m, x, v))
    norms = sum(isinstance(m, norm.BatchNorm) for m in model.modules())
    thirds = sum(isinstance(m, norm.BatchNorm) and not m.relu for m in model.modules())   # the blocks' third
    got = unpadded(coord, feat, offset, hierarchy=h)
    assert calls["plain"] == calls["prefix"] == [] and thirds >= 6
    assert calls["torch"] == [None] * thirds and calls["relu"] == [None] * (norms - thirds)   # BatchNorm1d, kernel
    torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10)
    for value in calls.values():
        value.clear()
    with padding.batch_rows(prefixes):
        got = twin.body(pc, pf, ph)
    loss = F.cross_entropy(got, pl, ignore_index=IGNORE)
    loss.backward()
    assert calls["prefix"] == calls["torch"] == [] and len(calls["plain"]) == thirds
    assert len(calls["relu"]) == norms - thirds and all(v is not None for v in calls["plain"] + calls["relu"])
    assert_same_step(model, twin, want, label, got, loss)
    for value in calls.values():
        value.clear()
    with forced("torch"), padding.batch_rows(prefixes):
        F.cross_entropy(control.body(pc, pf, ph), pl, ignore_index=IGNORE).backward()
    assert len(calls["prefix"]) == norms and calls["plain"] == calls["relu"] == []


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_a_padded_step_runs_the_compiled_plain_kernel_by_default(monkeypatch, kernel_failures_forgotten):
    """On CUDA, ``POINTGEOPE_KERNELS`` unset (the compiled kernels, the CUDA defaults): the padded float64 PTv1 (rpe)
    step runs every block's third norm on the plain kernel over its real prefix and no torch-ops prefix batch
    norm, and equals the unpadded step on torch's paths (real logits, loss, every gradient and running buffer);
    no kernel fell back. The batch and its hierarchy are made on the CPU (test_padding.py's) and moved."""
    from pointgeope.model import PointTransformerSeg
    from tests.model.test_padding import IGNORE, SMALL, _batch, _padded, assert_same_step

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.delenv("POINTGEOPE_KERNELS", raising=False)
    torch.manual_seed(0)
    model = PointTransformerSeg(pe="rpe", **SMALL).double().train()
    coord, feat, offset, label = _batch()
    h, sizes, prefixes, (pc, pf, po, pl, ph) = _padded(model, coord, feat, offset, label)
    cuda = torch.device("cuda")
    model = model.to(cuda)
    twin = copy.deepcopy(model)
    coord, feat, offset, label, pc, pf, pl = (t.to(cuda) for t in (coord, feat, offset, label, pc, pf, pl))
    h, ph, prefixes = h.to(cuda), ph.to(cuda), {rows: valid.to(cuda) for rows, valid in prefixes.items()}
    with forced("torch"):
        want = model(coord, feat, offset, hierarchy=h)
        F.cross_entropy(want, label, ignore_index=IGNORE).backward()
    plain_calls, plain = [], norm.PLAIN_KERNEL.triton
    monkeypatch.setattr(norm.PLAIN_KERNEL, "triton", lambda *a: plain_calls.append(a[8]) or plain(*a))
    monkeypatch.setattr(norm, "prefix_batch_norm", lambda *a: pytest.fail("the torch ops' prefix batch norm ran"))
    with padding.batch_rows(prefixes):
        got = twin.body(pc, pf, ph)
    loss = F.cross_entropy(got, pl, ignore_index=IGNORE)
    loss.backward()
    thirds = sum(isinstance(m, norm.BatchNorm) and not m.relu for m in model.modules())   # the blocks' third
    assert len(plain_calls) == thirds >= 6 and all(v is not None for v in plain_calls)
    assert kernels.failures() == {}
    assert_same_step(model, twin, want, label, got, loss)


def test_a_cuda_default_in_padded_batches_only(monkeypatch):
    """``batch_norm`` is a CUDA default inside ``padding.batch_rows`` (a padded batch, where its torch path is the
    prefix statistics' torch ops) and opt-in outside it (torch's ``BatchNorm1d`` was faster unpadded): on CUDA
    tensors (a device name: nothing runs) with ``POINTGEOPE_KERNELS`` unset only inside, with ``triton`` both,
    with ``torch`` neither; ``batch_norm_relu`` in both unless ``torch``; CPU tensors as the ReLU's kernel; under
    deterministic algorithms still (no atomics); not after it failed; ``pointgeope info`` says where."""
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    monkeypatch.delenv("POINTGEOPE_KERNELS", raising=False)
    monkeypatch.setattr(kernels, "FAILURES", type(kernels.FAILURES)())       # no failure of earlier tests
    imports = kernels.triton_imports()
    for path in (None, "triton", "torch"):
        with forced(path) if path else contextlib.nullcontext():
            assert norm.PLAIN_KERNEL.enabled(cuda) == (path == "triton" and imports)
            assert norm.KERNEL.enabled(cuda) == (path != "torch" and imports)
            with padding.batch_rows({}):
                assert norm.PLAIN_KERNEL.enabled(cuda) == norm.KERNEL.enabled(cuda) == (path != "torch" and imports)
                assert norm.PLAIN_KERNEL.enabled(cpu) == norm.KERNEL.enabled(cpu)
            assert norm.PLAIN_KERNEL.enabled(cpu) == norm.KERNEL.enabled(cpu)
    assert not padding.padded() and not norm.PLAIN_KERNEL.enabled(cpu)
    with padding.batch_rows({}):
        monkeypatch.setattr(torch, "are_deterministic_algorithms_enabled", lambda: True)
        assert norm.PLAIN_KERNEL.enabled(cuda) == imports
        kernels.FAILURES.add("batch_norm", RuntimeError("ptxas fatal (injected)"))
        assert not norm.PLAIN_KERNEL.enabled(cuda) and norm.KERNEL.enabled(cuda) == imports
    if imports:
        assert "Triton on CUDA (batch_norm in padded batches only; elsewhere with POINTGEOPE_KERNELS=triton)" \
            in kernels.status()


@pytest.mark.parametrize("relu", [True, False])
def test_info_check_runs_each_norm_padded_against_the_prefix_statistics(interpreted, relu):
    """``info --check``'s padded row of each norm's kernel (both are the CUDA defaults in a graph's padded step):
    the kernel given the real prefix (the last 1/32 of its rows dummy), its reference the torch ops' prefix
    statistics over the same rows, and the two agree within the row's tolerance."""
    from pointgeope.model.norm_check import check_cases

    kernel = norm.KERNEL if relu else norm.PLAIN_KERNEL
    given, ops, fused = [], norm.prefix_batch_norm, kernel.triton
    interpreted.setattr(kernel, "triton", lambda *a: given.append(("kernel", a[0].shape[0], int(a[8]))) or fused(*a))
    interpreted.setattr(norm, "prefix_batch_norm",
                        lambda *a: given.append(("ops", a[0].shape[0], int(a[1]))) or ops(*a))
    case = check_cases(relu, torch.device("cpu"), 96, 6)[-1]
    assert case.label == "fwd+bwd float32 padded"
    diff, _ = case.compare(case.run(), case.reference())
    assert given == [("kernel", 96, 93), ("ops", 96, 93)] and diff <= case.tolerance
