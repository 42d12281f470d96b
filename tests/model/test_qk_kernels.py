"""Tests of pointgeope/model/qk_kernels.py: the per-token rotation's gradient (the inverse rotation), its
cache-sized steps, and the constant tables it asks for; against the references of qk_reference.py."""
from __future__ import annotations

import pytest
import torch

from pointgeope.model import qk_kernels
from pointgeope.model.qk_encodings import qk_encoding
from tests.model.qk_reference import F64, ROTARY, inputs


@pytest.mark.parametrize("name", ROTARY)
def test_gradient_is_the_inverse_rotation(name):
    q, k, _, coord, grid = inputs(b=1, h=2, length=4, d=16)
    enc = qk_encoding(name, 16).eval()
    assert torch.autograd.gradcheck(lambda a, b: enc(a, b, coord, grid),
                                    (q.requires_grad_(), k.requires_grad_()))


@pytest.mark.parametrize("name", ROTARY)
def test_cache_sized_steps_give_the_same_rotation(name, monkeypatch):
    q, k, _, coord, grid = inputs(b=5, d=16)
    enc = qk_encoding(name, 16).eval()
    whole = enc(q, k, coord, grid)
    monkeypatch.setattr(qk_kernels, "_STEP_ELEMENTS", 2 * q[:1].numel())                 # steps of 2 rows
    for got, expected in zip(enc(q, k, coord, grid), whole, strict=True):
        assert torch.equal(got, expected)


@pytest.mark.parametrize("name", ["geope", "rope3d", "point3drope"])
def test_rotation_tables_that_need_a_gradient_pass_it_on(name):
    """Constant tables take the fast Function (gradient for ``x`` only); tables that need a gradient (positions
    that do) take plain autograd, so the gradient reaches them (it used to be refused): the same rotation, and
    gradcheck in ``x`` and the tables."""
    q, _, _, coord, _ = inputs(b=1, h=2, length=3, d=12)
    enc = qk_encoding(name, 12).eval()
    if name == "geope":
        tables, swap = qk_kernels.block_tables(coord, enc.block_scale(F64, coord.device), 12), None
    else:
        tables, swap = qk_kernels.half_tables(enc.angles(coord), enc.first, enc.second, 12), enc.swap
    fast = qk_kernels.turn_tokens(q, tables, swap)
    assert fast.grad_fn is None or type(fast.grad_fn).__name__ == "_TurnTokensBackward"
    needy = tables.clone().requires_grad_()
    slow = qk_kernels.turn_tokens(q, needy, swap)
    assert slow.grad_fn is not None and "TurnTokens" not in type(slow.grad_fn).__name__
    torch.testing.assert_close(slow, fast, atol=1e-14, rtol=0)
    assert torch.autograd.gradcheck(lambda x, t: qk_kernels.turn_tokens(x, t, swap), (q.requires_grad_(), needy))
