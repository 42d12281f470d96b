"""pointgeope/geope.py at its edges: positions of fewer dims than the features (the documented broadcast) on
every autograd path, and inputs that have no rotation (integer, bool, complex features; bad constructor
arguments), refused by name."""
from __future__ import annotations

import pytest
import torch

from pointgeope.geope import BlockScale, GeoPE, apply_geope, rotate
from pointgeope.model.ops import interpolate
from pointgeope.nn import geope_attention, geope_qk
from tests.model.test_padding import _SizedByValues

# (x shape, pos shape): pos broadcast against x's leading dims, with fewer (or more) dims than x
SHAPES = [((2, 5, 6), (5, 3)), ((5, 6), (3,)), ((5, 6), (4, 1, 3)), ((2, 4, 5, 7), (5, 3))]


@pytest.mark.parametrize("x_shape, pos_shape", SHAPES)
def test_learnable_frequencies_and_positions_with_a_gradient_broadcast_as_fixed_ones(x_shape, pos_shape):
    """The plain-autograd formula (learnable frequencies, or positions that need a gradient) gives the values
    of the fast path, and the gradients of the same call with ``pos`` expanded to ``x``'s dims by hand."""
    torch.manual_seed(0)
    x = torch.randn(x_shape, dtype=torch.float64)
    pos = torch.rand(pos_shape, dtype=torch.float64) * 2
    channels = x_shape[-1]
    learn = GeoPE(channels, pos_scale=3.0, learnable=True).double()
    out = learn(x, pos)
    fixed = apply_geope(x, pos, learn.block_scale(torch.float64, "cpu").detach())   # the custom autograd path
    torch.testing.assert_close(out, fixed, atol=1e-12, rtol=0)
    shape = torch.broadcast_shapes(x_shape[:-1], pos_shape[:-1])
    wide = pos.expand(*shape, 3)
    grad = torch.randn(out.shape, dtype=torch.float64)
    (got,) = torch.autograd.grad(learn(x, pos), learn.block_scale.freq, grad)
    (want,) = torch.autograd.grad(learn(x.expand(*shape, channels), wide), learn.block_scale.freq, grad)
    torch.testing.assert_close(got, want, atol=1e-12, rtol=0)
    p = pos.clone().requires_grad_()
    pw = wide.clone().requires_grad_()
    fixed_pe = GeoPE(channels, pos_scale=3.0)
    (got,) = torch.autograd.grad(fixed_pe(x, p), p, grad)
    (want,) = torch.autograd.grad(fixed_pe(x.expand(*shape, channels), pw), pw, grad)
    torch.testing.assert_close(got, want.sum_to_size(pos_shape), atol=1e-12, rtol=0)


def test_gradcheck_of_learnable_frequencies_with_shared_positions():
    torch.manual_seed(1)
    pe = GeoPE(7, pos_scale=2.0, learnable=True).double()
    x = torch.randn(2, 5, 7, dtype=torch.float64, requires_grad=True)
    pos = torch.rand(5, 3, dtype=torch.float64, requires_grad=True)
    freq = pe.block_scale.freq
    assert torch.autograd.gradcheck(lambda x, pos, f: apply_geope(x, pos, f * 2.0 / 3), (x, pos, freq))


def test_geope_qk_and_attention_broadcast_positions_with_a_gradient_and_a_learnable_block_scale():
    torch.manual_seed(2)
    q, k, v = (torch.randn(2, 4, 5, 6) for _ in range(3))
    pos = torch.rand(5, 3)
    want = geope_attention(q, k, v, pos)
    scale = BlockScale(6, learnable=True)
    torch.testing.assert_close(geope_attention(q, k, v, pos, block_scale=scale(torch.float32, "cpu")), want)
    q, k, pos = q.double(), k.double(), pos.double()
    p = pos.clone().requires_grad_()
    got_q, got_k = geope_qk(q, k, p)
    want_q, want_k = geope_qk(q, k, pos)
    torch.testing.assert_close(got_q, want_q)
    torch.testing.assert_close(got_k, want_k)
    (grad,) = torch.autograd.grad((got_q * got_k).sum(), p)
    pw = pos.expand(2, 1, 5, 3).clone().requires_grad_()               # (B, 1, L, A): q's dims, ones for heads
    wq, wk = geope_qk(q, k, pw)
    (grad_wide,) = torch.autograd.grad((wq * wk).sum(), pw)
    torch.testing.assert_close(grad, grad_wide.sum((0, 1)))
    assert rotate(torch.randn(4, 2, 3), torch.rand(2, 3, requires_grad=True)).shape == (4, 2, 3)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.bool, torch.complex64])
def test_features_that_are_not_floating_point_are_refused_by_name(dtype):
    """The rotation runs in float and is cast back: an integer feature would come back truncated toward 0,
    a bool one all True, a complex one without its imaginary part (each silently, before)."""
    x = torch.tensor([[10, 0, 0, 10, 0, 0]]).to(dtype)
    pos = torch.tensor([[1.0, 0.5, 0.2]])
    pe = GeoPE(6, pos_scale=1.0)
    for call in (lambda: pe(x, pos), lambda: pe.relative(x, pos, pos),
                 lambda: apply_geope(x, pos, pe.block_scale(torch.float32, "cpu"))):
        with pytest.raises(TypeError, match=rf"expected x a floating-point tensor, got dtype {dtype} \(cast it"):
            call()
    with pytest.raises(TypeError, match=rf"expected v a floating-point tensor, got dtype {dtype}"):
        rotate(x[:, :3], pos)
    with pytest.raises(TypeError, match=rf"expected source_feat a floating-point tensor, got dtype {dtype}"):
        interpolate(pos, pos, x, [1], [1])


def test_integer_positions_rotate_as_their_float_values_bool_and_complex_ones_are_refused():
    """Integer positions (grid coordinates) are numbers: the same rotation as their float values."""
    pe = GeoPE(6, pos_scale=0.3)
    x = torch.randn(4, 6, dtype=torch.float64)
    grid = torch.tensor([[0, 1, 2], [3, -1, 0], [5, 5, 5], [0, 0, 0]])
    torch.testing.assert_close(pe(x, grid), pe(x, grid.double()), atol=0, rtol=0)
    for bad in (grid > 0, grid.to(torch.complex64)):
        with pytest.raises(TypeError, match=rf"expected pos a floating-point or integer tensor, got dtype {bad.dtype}"):
            pe(x, bad)
        with pytest.raises(TypeError, match="expected phases a floating-point or integer tensor"):
            rotate(x[:, :3], bad)


@pytest.mark.parametrize("channels", [0, -3, 2])
def test_fewer_than_three_channels_are_refused_when_built(channels):
    for make in (GeoPE, BlockScale, lambda c: BlockScale(c, learnable=True)):
        with pytest.raises(ValueError, match=rf"expected at least 3 channels for one rotation block, got {channels}"):
            make(channels)


@pytest.mark.parametrize("axes", [0, 4, 5, True])
def test_block_scale_takes_one_two_or_three_axes(axes):
    """``k_b = pos_scale w_b / A``: ``BlockScale(6, axes=5)`` divided every phase by 5 with no message."""
    with pytest.raises(ValueError, match=rf"expected axes in \(1, 2, 3\), got {axes!r}"):
        BlockScale(6, axes=axes)
    with pytest.raises(ValueError, match=rf"expected axes in \(1, 2, 3\), got {axes!r}"):
        GeoPE(6, axes=axes)


def test_positions_that_do_not_broadcast_against_the_features_are_refused_by_name():
    """``(B, L, A)`` positions for ``(B, H, L, C)`` features of ``H != B``: torch's "The size of tensor a (2) must
    match the size of tensor b (3)" from inside the rotation, naming neither input."""
    pe = GeoPE(6)
    x, pos = torch.randn(2, 3, 5, 6), torch.randn(2, 5, 3)
    with pytest.raises(ValueError, match=r"expected positions whose leading dims broadcast against x's \(2, 3, 5\), "
                                         r"got \(2, 5, 3\)"):
        pe(x, pos)
    with pytest.raises(ValueError, match=r"got \(2, 5, 3\) and \(5, 1, 3\)"):
        pe.relative(x, torch.randn(5, 1, 3), pos)
    assert pe(x, pos[:, None]).shape == x.shape                  # (B, 1, L, A): the documented broadcast


def test_the_module_refuses_positions_the_point_ops_refuse():
    """NaN, inf, or finite positions beyond ~1.8e19 (float32's axis norm overflows) came back as NaN features
    without a word; the module holds its positions to the point ops' rule (finite, within +-2^60)."""
    pe, x = GeoPE(6), torch.randn(4, 2, 6)
    pos = torch.rand(4, 2, 3)
    with pytest.raises(ValueError, match=r"expected finite pos, got 1 NaN or infinite entries \(the first in row 2"):
        pe(x, pos.index_put((torch.tensor(2), torch.tensor(1), torch.tensor(0)), torch.tensor(float("nan"))))
    with pytest.raises(ValueError, match=r"expected pos_j within \+-2\^60 .* got 24 entries outside"):
        pe.relative(x, pos[:, :1], (1 + pos) * 1e29)
    with pytest.raises(ValueError, match=r"expected pos_i within \+-2\^60"):
        pe.relative(x, (1 + pos[:, :1]) * 1e29, pos, linear=True)
    assert pe(x, torch.full_like(pos, 2.0 ** 60)).isfinite().all()          # the limit itself is taken


def test_the_module_reads_its_positions_once_a_call_and_not_at_all_without_the_check():
    """The check is one host read a call (``relative`` read ``pos_i`` and ``pos_j`` apart: two synchronisations a
    call on a GPU); ``check_finite=False``, for a caller that checked its positions where they entered (a
    benchmark's loop), reads nothing, so the rotation alone is timed. Counted at the dispatcher: every
    ``bool()``, ``int()``, ``.item()`` of a tensor is one ``_local_scalar_dense``."""
    x, pos = torch.randn(4, 2, 6), torch.rand(4, 2, 3)
    calls = [("forward", (x, pos), {}), ("relative", (x, pos[:, :1], pos), {}),
             ("relative", (x, pos[:, :1], pos), {"linear": True})]
    for pe, reads in ((GeoPE(6), ["_local_scalar_dense"]), (GeoPE(6, check_finite=False), [])):
        for method, args, kwargs in calls:
            seen = []
            with _SizedByValues(seen):
                out = getattr(pe, method)(*args, **kwargs)
            assert seen == reads, (method, seen)
            assert out.isfinite().all()
    with pytest.raises(ValueError, match=r"expected pos_j within \+-2\^60"):   # one read, the bad one still named
        GeoPE(6).relative(x, pos[:, :1], pos * 1e29)
