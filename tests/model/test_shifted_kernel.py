"""Tests of the one-launch ``apply_shifted`` and ``rotation_tables`` (pointgeope/model/shifted_kernel.py,
triton_rotation.py) in Triton's interpreter: equal to torch's path (``apply_shifted``: the same fused multiply-adds
in the same order), to GeoPE's rotation written as explicit 3x3 matrices, gradients by gradcheck, and a GeoPE
layer's step on the CUDA default taking both."""
from __future__ import annotations

import pytest
import torch

from pointgeope.geope import apply_geope, frequencies, rotation_matrix
from pointgeope.model import kernels, rotation, shifted_kernel
from pointgeope.model.rotation import apply_shifted, rotation_tables
from tests.model.linear_gradcheck import LINEAR


def _fma_rounds_once() -> bool:
    """Whether Triton's interpreter rounds ``tl.fma`` once (3.9's: a real fma), as torch's ``addcmul`` does; an
    older one rounds its product, then its sum (``triton_rotation``'s docstring)."""
    from triton.runtime import interpreter

    return hasattr(getattr(interpreter, "_interpreter", None), "fma_fp32")


def _same(got: torch.Tensor, want: torch.Tensor) -> None:
    """Bit for bit where the interpreter's fma rounds once; else within one rounding a term."""
    assert got.dtype == want.dtype and got.shape == want.shape
    if _fma_rounds_once():
        assert torch.equal(got, want), float((got - want).abs().max())
    else:
        torch.testing.assert_close(got, want, rtol=0, atol=8 * torch.finfo(want.dtype).eps * want.abs().max())


def _inputs(channels: int, dtype: torch.dtype, n: int = 23, k: int = 5, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    pos = torch.rand(n, 3, generator=g, dtype=dtype) * 4
    scale = (frequencies(channels) * 25.0 / 3).to(dtype)
    x, m = torch.randn(n, channels, generator=g, dtype=dtype), torch.randn(n, channels, generator=g, dtype=dtype)
    return pos, scale, rotation_tables(pos, scale, channels), x, m, torch.randn(n, k, channels, generator=g,
                                                                                 dtype=dtype)


@pytest.fixture
def ran(interpreted_cpu):
    """The kernel's paths taken in the test (``KERNEL.ran``), forgotten before it."""
    rotation.KERNEL.ran.clear()
    return rotation.KERNEL.ran


@pytest.mark.parametrize("geometry", [torch.float32, torch.float64])
@pytest.mark.parametrize("features", [None, torch.bfloat16])
@pytest.mark.parametrize("channels", [32, 35, 7])
@pytest.mark.parametrize("transpose", [False, True])
def test_the_kernel_is_torchs_path(ran, geometry, features, channels, transpose):
    """Points ``(N, C)`` by tables ``(5, N, C)``; pairs ``(N, k, C)`` by the queries' ``(5, N, 1, C)`` minus
    ``(N, 1, C)``, into a new tensor and into ``out=``; features in the geometry's dtype or bfloat16. 17 points
    of 2 neighbours: a full row tile of 16 and a masked second, for the points (17 rows) and the pairs (34)."""
    pos, scale, tables, x, m, pairs = _inputs(channels, geometry, n=17, k=2)
    x, pairs = (x, pairs) if features is None else (x.to(features), pairs.to(features))
    _same(apply_shifted(x, tables, transpose=transpose), rotation._shifted_torch(x, tables, None, transpose, None))
    queries, minus = tables.unsqueeze(-2), m.unsqueeze(1)
    want = rotation._shifted_torch(pairs, queries, minus, transpose, None)
    _same(apply_shifted(pairs, queries, minus, transpose), want)
    out = torch.full_like(want, float("nan"))
    assert apply_shifted(pairs, queries, minus, transpose, out=out) is out
    _same(out, want)
    assert ran == {"triton"}


@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("channels", [33, 34])
def test_the_kernel_turns_each_block_by_its_3x3_matrix(ran, transpose, channels):
    """``R_b v_b`` with ``R_b = rotation_matrix(A k_b p)`` (``A = 3`` axes) as an explicit matrix product per
    block (``R_b^T`` with ``transpose``), the pass-through channels kept; and GeoPE's own ``apply_geope``."""
    pos, scale, tables, x, _, _ = _inputs(channels, torch.float64)
    blocks = channels // 3
    mats = rotation_matrix(3 * scale[:, None] * pos[:, None, :])                    # (N, n, 3, 3)
    mats = mats.transpose(-1, -2) if transpose else mats
    turned = torch.einsum("nbde,nbe->nbd", mats, x[:, : 3 * blocks].unflatten(-1, (blocks, 3))).flatten(1)
    got = apply_shifted(x, tables, transpose=transpose)
    torch.testing.assert_close(got[:, : 3 * blocks], turned, rtol=0, atol=1e-12)
    assert torch.equal(got[:, 3 * blocks:], x[:, 3 * blocks:])
    torch.testing.assert_close(got, apply_geope(x, pos, scale, inverse=transpose), rtol=0, atol=1e-12)
    assert ran == {"triton"}


@pytest.mark.parametrize("transpose", [False, True])
def test_gradients_by_gradcheck(ran, transpose):
    """float64: ``x`` of the pairs and the broadcast ``minus (N, 1, C)`` (summed over neighbours); the
    backward is the kernel again, transposed, and differentiable once more (gradgradcheck). 8 channels (a masked
    channel tile of 64), 18 rows (a full row tile of 16 and a masked second). Fast mode at linear_gradcheck.py's
    tolerance: the map is linear in ``(x, minus)``, so a wrong entry of the kernel's Jacobian (or of its
    backward's) shows in ``v^T J u`` for gradcheck's random ``u, v`` (at the default tolerance it could hide), as
    in the full Jacobian, which would take 2 interpreted launches per input element."""
    pos, scale, tables, _, m, pairs = _inputs(8, torch.float64, n=6, k=3)
    queries = tables.unsqueeze(-2)
    x, minus = pairs.requires_grad_(), m.unsqueeze(1).clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: apply_shifted(a, queries, b, transpose), (x, minus), **LINEAR)
    assert torch.autograd.gradgradcheck(lambda a, b: apply_shifted(a, queries, b, transpose), (x, minus),
                                        **LINEAR)
    assert ran == {"triton"}


@pytest.mark.parametrize("dtype, atol", [(torch.float64, 1e-12), (torch.float32, 3e-5)])
@pytest.mark.parametrize("channels, blocks", [(32, 10), (35, 11), (35, 9)])
def test_the_tables_kernel_writes_each_blocks_3x3_matrix(interpreted_cpu, dtype, atol, channels, blocks):
    """The tables' kernel: ``T_s[i, 3b + d] = R_b(p_i)[d, d + s - 2]`` of the explicit matrices
    ``rotation_matrix(A k_b p)`` in float64 (0 where ``d + s - 2`` leaves the block), 1 on ``T_0`` past the blocks
    and 0 elsewhere, the identity at the origin; float32 within its phases' rounding (phases up to ~110 rad in a
    10 x 8 x 3 m crop at the recipe's scales: ``2^-24`` of that), and torch's path within the same."""
    g = torch.Generator().manual_seed(5)
    pos = torch.rand(30, 3, generator=g, dtype=torch.float64) * torch.tensor([10.0, 8.0, 3.0], dtype=torch.float64)
    pos[0] = 0
    scale = (frequencies(channels) * 25.0 / 3)[:blocks].double()
    rotation.TABLES_KERNEL.ran.clear()
    got = rotation.rotation_tables(pos.to(dtype), scale.to(dtype), channels)
    assert rotation.TABLES_KERNEL.ran == {"triton"} and got.dtype == dtype and got.shape == (5, 30, channels)
    mats = rotation_matrix(3 * scale[:, None] * pos[:, None, :])                    # (N, n, 3, 3)
    want = torch.zeros(5, 30, channels, dtype=torch.float64)
    for s in range(5):
        for d in range(3):
            if 0 <= d + s - 2 < 3:
                want[s, :, d: 3 * blocks: 3] = mats[:, :, d, d + s - 2]
    want[2, :, 3 * blocks:] = 1
    torch.testing.assert_close(got.double(), want, rtol=0, atol=atol)
    assert torch.equal(got[:, 0], want[:, 0].to(dtype))                             # R = I exactly at p = 0
    assert torch.equal(got[..., 3 * blocks:], want[..., 3 * blocks:].to(dtype))
    torch.testing.assert_close(got, rotation._tables_torch(pos.to(dtype), scale.to(dtype), channels), rtol=0,
                               atol=atol)


def test_tables_that_need_a_gradient_stay_on_torch(ran):
    """The kernel has no gradient for the tables: with tables that need one, torch's path (autograd)."""
    _, _, tables, x, _, _ = _inputs(9, torch.float64, n=5)
    tables = tables.clone().requires_grad_()
    apply_shifted(x, tables).sum().backward()
    assert ran == set() and tables.grad is not None


def test_the_cpu_default_stays_on_torch(kernel_failures_forgotten, monkeypatch):
    """No switch: the CPU keeps its torch path (the Triton function never runs)."""
    monkeypatch.delenv("POINTGEOPE_KERNELS", raising=False)
    monkeypatch.setattr(rotation.KERNEL, "triton", lambda *a: pytest.fail("the Triton function ran"))
    _, _, tables, x, _, _ = _inputs(9, torch.float32, n=5)
    torch.testing.assert_close(apply_shifted(x, tables), rotation._shifted_torch(x, tables, None, False, None))


def test_a_geope_layers_step_on_the_cuda_default_takes_the_kernel(interpreted_cpu, monkeypatch):
    """A standard GeoPE layer's training step on the CUDA default's choices (CPU tensors asked about as CUDA
    ones, the switch unset): the tables are built by their kernel, the points turned by the kernel before the
    fused relation and turned back by it in the relation's backward, never by torch's ops; output and gradients
    as on torch's path."""
    from pointgeope.model import PointTransformerLayer
    from pointgeope.model.kernel_choice import forced

    g = torch.Generator().manual_seed(4)
    coord, feat = torch.rand(40, 3, generator=g) * 2, torch.randn(40, 24, generator=g)
    idx = torch.cdist(coord, coord).topk(6, largest=False).indices
    torch.manual_seed(0)
    layer = PointTransformerLayer(24, share_planes=4, neighbours=6, pe="geope").train()

    def step():
        x = feat.clone().requires_grad_()
        out = layer(coord, x, idx)
        out.square().sum().backward()
        return out.detach(), x.grad

    with forced("torch"):
        want = step()
    calls, use = [], kernels.use_triton
    monkeypatch.delenv("POINTGEOPE_KERNELS")
    monkeypatch.setattr(kernels, "use_triton", lambda name, device, atomics=False: use(name, torch.device("cuda"),
                                                                                         atomics))
    fused = rotation.KERNEL.triton
    monkeypatch.setattr(rotation.KERNEL, "triton", lambda *a: calls.append(a[3]) or fused(*a))
    monkeypatch.setattr(rotation.KERNEL, "torch", lambda *a: pytest.fail("torch's apply_shifted ran"))
    monkeypatch.setattr(rotation.TABLES_KERNEL, "torch", lambda *a: pytest.fail("torch's tables ran"))
    rotation.TABLES_KERNEL.ran.clear()
    got = step()
    assert calls == [False, True]                 # R x (forward), then R^T of the points' gradient (backward)
    assert rotation.TABLES_KERNEL.ran == {"triton"}
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_a_backward_whose_kernel_fails_falls_back_to_torch(ran, monkeypatch):
    """The backward compiles its own specialisation (``R^T``): where that fails (a compiler or driver error of
    this device), one warning, the kernel off, and the gradient by torch's ops, as a forward's failure does."""
    from pointgeope.model import shifted_kernel

    _, _, tables, _, _, pairs = _inputs(8, torch.float64, n=6, k=3)
    queries, launch = tables.unsqueeze(-2), shifted_kernel._launch

    def launch_forward_only(x, tables, minus, transpose, out):
        if transpose:
            raise RuntimeError("PTXASError: ptxas fatal (this device)")
        return launch(x, tables, minus, transpose, out)
    monkeypatch.setattr(shifted_kernel, "_launch", launch_forward_only)
    x, g = pairs.clone().requires_grad_(), torch.randn(pairs.shape, dtype=torch.float64)
    with pytest.warns(kernels.KernelFallbackWarning, match="apply_shifted"):
        apply_shifted(x, queries).backward(g)
    torch.testing.assert_close(x.grad, rotation._shifted_torch(g, queries, None, True, None), rtol=0, atol=1e-12)
    assert "apply_shifted" in kernels.failures() and ran == {"triton", "torch"}


@pytest.mark.parametrize("where", ["minus", "out"])
def test_a_tensor_on_another_device_is_torchs_error_and_keeps_the_kernel(ran, where):
    """``minus`` or ``out`` on another device than ``x``: torch's own error, and the kernel stays on (a caller's
    mistake is not a failure of the kernel, ``kernels.py``)."""
    _, _, tables, x, m, _ = _inputs(9, torch.float32, n=5)
    meta = torch.empty(x.shape, device="meta")
    with pytest.raises(RuntimeError, match="device"):
        apply_shifted(x, tables, meta if where == "minus" else m, out=meta if where == "out" else None)
    assert kernels.failures() == {}
    _same(apply_shifted(x, tables), rotation._shifted_torch(x, tables, None, False, None))
    assert ran == {"triton"}                        # the refused call went to torch's ops without the dispatch


@pytest.mark.parametrize("transpose", [False, True])
def test_wide_strided_and_three_leading_dims_are_torchs_path(ran, transpose):
    """Widths past one channel tile (``BLOCK_C`` = 64: blocks 21 and 42 straddle tiles, each term reads its
    neighbour tile's channels), inputs through their strides (a channel stride of 2, rows transposed, an ``out=``
    slice of a wider tensor), and the dot-product attention's tables ``(5, B, 1, L, D)`` over ``(B, H, L, D)``
    heads with a ``minus`` broadcast over the heads: three leading dimensions."""
    for channels in (100, 130):
        pos, scale, tables, x, m, _ = _inputs(channels, torch.float32, n=21)
        _same(apply_shifted(x, tables, m, transpose), rotation._shifted_torch(x, tables, m, transpose, None))
    wide = torch.randn(21, 2 * channels, generator=torch.Generator().manual_seed(1))[:, ::2]     # stride 2
    rows = torch.randn(channels, 21, generator=torch.Generator().manual_seed(2)).t()               # (21, C), rows 1
    for x in (wide, rows):
        want = rotation._shifted_torch(x, tables, None, transpose, None)
        _same(apply_shifted(x, tables, transpose=transpose), want)
        out = torch.full((21, channels + 7), float("nan"))[:, 3: 3 + channels]
        assert apply_shifted(x, tables, transpose=transpose, out=out) is out
        _same(out, want)
    pos, scale, tables, _, _, _ = _inputs(70, torch.float32, n=2 * 9)
    heads = tables.view(5, 2, 1, 9, 70)
    g = torch.Generator().manual_seed(3)
    x, m = torch.randn(2, 3, 9, 70, generator=g).to(torch.bfloat16), torch.randn(2, 1, 9, 70, generator=g)
    _same(apply_shifted(x, heads, m, transpose), rotation._shifted_torch(x, heads, m, transpose, None))
    assert ran == {"triton"}


@pytest.mark.parametrize("mistake", ["out with a gradient", "broadcast out"])
def test_an_out_torch_refuses_is_torchs_error_and_keeps_the_kernel(ran, mistake):
    """``out=`` while ``x`` needs a gradient, or an ``out`` whose rows share memory (expanded): torch's own error,
    and the kernel stays on for the next call."""
    _, _, tables, x, _, _ = _inputs(9, torch.float32, n=5)
    if mistake == "out with a gradient":
        x, out = x.clone().requires_grad_(), torch.empty(5, 9)
    else:
        out = torch.empty(1, 9).expand(5, 9)
    with pytest.raises(RuntimeError, match=r"out=|single memory location"):
        apply_shifted(x, tables, out=out)
    assert kernels.failures() == {}
    _same(apply_shifted(x.detach(), tables), rotation._shifted_torch(x.detach(), tables, None, False, None))
    assert ran == {"triton"}


@pytest.mark.parametrize("pos_dtype, scale_dtype", [(torch.float64, torch.float32), (torch.float32, torch.float64),
                                                    (torch.bfloat16, torch.bfloat16)])
def test_tables_in_mixed_or_low_dtypes_stay_on_torch(interpreted_cpu, pos_dtype, scale_dtype):
    """The tables' kernel reads the scales in the positions' dtype, float32 or float64, as given (no cast):
    scales in another dtype, or bf16 positions, are left to torch's path, which builds them in ``pos``'s dtype."""
    g = torch.Generator().manual_seed(6)
    pos, scale = torch.rand(12, 3, generator=g).to(pos_dtype), (frequencies(24) * 25.0 / 3)[:8].to(scale_dtype)
    assert not shifted_kernel.tables_take(pos, scale, 24)
    rotation.TABLES_KERNEL.ran.clear()
    got = rotation_tables(pos, scale, 24)
    assert rotation.TABLES_KERNEL.ran == set() and got.dtype == pos_dtype
    mats = rotation_matrix(3 * scale.double()[:, None] * pos.double()[:, None, :])            # (N, n, 3, 3)
    atol = 0.25 if pos_dtype == torch.bfloat16 else 1e-5        # bf16: phases up to ~25 rad known to 2^-8
    torch.testing.assert_close(got[2, :, 0:24:3].double(), mats[:, :, 0, 0], rtol=0, atol=atol)
