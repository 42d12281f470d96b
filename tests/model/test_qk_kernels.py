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
    for got, expected in zip(enc(q, k, coord, grid), whole):
        assert torch.equal(got, expected)


def test_rotation_tables_that_need_a_gradient_are_refused():
    """The tables are constants (the backward pass turns ``x``'s gradient only): tables that need a gradient
    (learnable frequencies) would lose it silently, so ``turn_tokens`` refuses them; without autograd it turns."""
    q, _, _, coord, _ = inputs(d=16)
    tables = qk_kernels.block_tables(coord, torch.full((5,), 2.0, dtype=F64), 16).requires_grad_()
    with pytest.raises(ValueError, match="expected rotation tables without gradient .*apply_geope"):
        qk_kernels.turn_tokens(q, tables)
    with torch.no_grad():
        assert torch.equal(qk_kernels.turn_tokens(q, tables), qk_kernels.turn_blocks(q, tables))
    assert torch.equal(qk_kernels.turn_tokens(q, tables.detach()), qk_kernels.turn_blocks(q, tables.detach()))
