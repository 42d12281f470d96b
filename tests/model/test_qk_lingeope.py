"""Tests of pointgeope/model/qk_lingeope.py: LinGeoPE's attention against per-pair rotation matrices
(qk_reference.py), its chunks, and its gradient through the checkpointed chunks."""
from __future__ import annotations

import pytest
import torch

from pointgeope.model.qk_encodings import ROTARY_HEAD_DIM, LinGeoPEQK, qk_encoding
from tests.conftest import cuda_devices
from tests.model.qk_reference import inputs, lingeope_reference


@pytest.mark.parametrize("device", cuda_devices())
@pytest.mark.parametrize("head_dim", [ROTARY_HEAD_DIM, 16])
def test_lingeope_attention_matches_per_pair_matrices(head_dim, device):
    q, k, v, coord, _ = inputs(length=9, d=head_dim, device=device)
    out = qk_encoding("lingeope", head_dim).eval().to(device).attention(q, k, v, coord)
    torch.testing.assert_close(out, lingeope_reference(q, k, v, coord), atol=1e-9, rtol=0)


def test_lingeope_chunks_give_the_same_attention(monkeypatch):
    from pointgeope.model import qk_lingeope
    q, k, v, coord, _ = inputs(b=5, length=8)
    enc = qk_encoding("lingeope", ROTARY_HEAD_DIM)
    whole = enc.attention(q, k, v, coord)
    monkeypatch.setattr(qk_lingeope, "_CHUNK_ELEMENTS", 2 * 3 * 8 * 8)                  # rows of 2
    torch.testing.assert_close(enc.attention(q, k, v, coord), whole, atol=1e-12, rtol=0)


def test_lingeope_gradient_through_the_checkpointed_chunks():
    q, k, v, coord, _ = inputs(b=2, h=2, length=5, d=7)
    enc = LinGeoPEQK(7)
    assert torch.autograd.gradcheck(lambda a, b, c: enc.attention(a, b, c, coord),
                                    (q.requires_grad_(), k.requires_grad_(), v.requires_grad_()))
