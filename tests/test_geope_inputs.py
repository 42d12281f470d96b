"""pointgeope/geope.py at its edges: positions of fewer dims than the features (the documented broadcast) on
every autograd path, and inputs that have no rotation (integer, bool, complex features; bad constructor
arguments), refused by name."""
from __future__ import annotations

import pytest
import torch

from pointgeope.geope import BlockScale, GeoPE, apply_geope, rotate
from pointgeope.nn import geope_attention, geope_qk

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
