"""The single-expression pair kernels of pointgeope/model/geope_pairs.py against the eager fused kernels
(on every device, eagerly), and compiled on CUDA against float64 on the CPU (values and gradients)."""
from __future__ import annotations

import pytest
import torch

from pointgeope.geope import frequencies
from pointgeope.model import geope_pairs
from pointgeope.model.linear_rotation import relative_blocks, relative_frame
from pointgeope.model.rotation import apply_shifted, query_frame, rotation_tables
from tests.conftest import cuda_devices


def _setup(n=300, k=6, channels=20, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, channels, generator=g, dtype=dtype)
    pos = torch.rand(n, 3, generator=g, dtype=dtype) * 4
    idx = torch.randint(0, n, (n, k), generator=g)
    minus = torch.randn(n, channels, generator=g, dtype=dtype)
    return x, pos, idx, minus, frequencies(channels).to(dtype) * 25.0 / 3


@pytest.mark.parametrize("transpose", [False, True])
def test_shifted_sum_is_apply_shifted(transpose):
    x, pos, idx, _, scale = _setup()
    tables = rotation_tables(pos, scale, x.shape[-1])
    pairs = x[idx]
    torch.testing.assert_close(geope_pairs.shifted_sum(pairs, tables.unsqueeze(-2), transpose),
                               apply_shifted(pairs, tables.unsqueeze(-2), transpose=transpose))


def test_frame_and_turn_pairs_are_the_eager_relation_and_its_adjoint():
    x, pos, idx, minus, scale = _setup()
    tables = rotation_tables(pos, scale, x.shape[-1])
    points = apply_shifted(x, tables)
    torch.testing.assert_close(geope_pairs.frame_pairs(points, idx, tables, minus),
                               query_frame(x, idx, pos, scale, minus))
    g = torch.randn(*idx.shape, x.shape[-1], dtype=x.dtype)
    # <R_i^T p, g> = <p, R_i g> for every pair
    lhs = (geope_pairs.frame_pairs(points, idx, tables, None) * g).sum()
    rhs = (points[idx] * geope_pairs.turn_pairs(g, tables)).sum()
    torch.testing.assert_close(lhs, rhs)


def test_relative_pairs_are_linear_geope():
    x, pos, idx, minus, scale = _setup()
    disp = pos[idx] - pos[:, None]
    expected = relative_frame(x, idx, disp, scale, minus)
    torch.testing.assert_close(geope_pairs.relative_pairs(x, idx, disp, scale, minus), expected)
    rows = x[idx].reshape(-1, x.shape[-1])
    torch.testing.assert_close(geope_pairs.rodrigues_rows(rows, disp.reshape(-1, 3), scale),
                               relative_blocks(rows, disp.reshape(-1, 3), scale))


def test_kernels_take_the_fused_branch_where_it_is_active(monkeypatch):
    """The branch that CUDA takes, run here with the single expressions eagerly: the layer's relations
    (values and feature gradients) equal the eager kernels' on the same inputs, bf16 features included."""
    x, pos, idx, minus, scale = _setup(channels=21)
    disp, x = pos[idx] - pos[:, None], x.requires_grad_()
    weight = torch.randn(*idx.shape, x.shape[-1], dtype=x.dtype)
    eager = relative_frame(x, idx, disp, scale, minus)
    eager_grad = torch.autograd.grad((eager * weight).sum(), x)[0]
    half_inputs = (x.detach().bfloat16(), idx, disp.float(), scale.float(), minus.bfloat16())
    eager_half = relative_frame(*half_inputs)
    monkeypatch.setattr(geope_pairs, "active", lambda device: True)
    monkeypatch.setattr(geope_pairs, "on_device", lambda fn, *args: fn(*args))
    fused = relative_frame(x, idx, disp, scale, minus)
    torch.testing.assert_close(fused, eager, atol=1e-12, rtol=0)
    torch.testing.assert_close(torch.autograd.grad((fused * weight).sum(), x)[0], eager_grad, atol=1e-12, rtol=0)
    half = relative_frame(*half_inputs)
    assert half.dtype == eager_half.dtype == torch.bfloat16
    torch.testing.assert_close(half.float(), eager_half.float(), atol=0.02, rtol=0.01)   # one bf16 rounding


@pytest.mark.parametrize("device", [d for d in cuda_devices() if d == "cuda"])
def test_cuda_fused_relations_match_float64(device):
    """On CUDA the relations run the compiled kernels: values and gradients against float64 on the CPU."""
    x, pos, idx, minus, scale = _setup(n=2000, k=16, channels=64, seed=3)
    disp = pos[idx] - pos[:, None]
    for fn, args in ((query_frame, (idx, pos, scale, minus)), (relative_frame, (idx, disp, scale, minus))):
        xs = x.clone().requires_grad_()
        ms = minus.clone().requires_grad_()
        exact = fn(xs, args[0], args[1], args[2], ms)
        g = torch.randn_like(exact)
        exact.backward(g)
        xd = x.float().to(device).requires_grad_()
        md = minus.float().to(device).requires_grad_()
        out = fn(xd, args[0].to(device), args[1].float().to(device), args[2].float().to(device), md)
        out.backward(g.float().to(device))
        torch.testing.assert_close(out.double().cpu(), exact.detach(), atol=2e-4, rtol=1e-4)
        torch.testing.assert_close(xd.grad.double().cpu(), xs.grad, atol=2e-3, rtol=1e-4)
        torch.testing.assert_close(md.grad.double().cpu(), ms.grad, atol=2e-3, rtol=1e-4)
    assert "failed" not in geope_pairs.status(), geope_pairs.status()


def _one_rounding(pairs, exact) -> float:
    """The largest error of ``pairs`` in units of one bfloat16 rounding of the exact values (``2^-8 |r|``,
    bf16's unit roundoff) plus ``1e-4`` for float32's own error: at most 1 where ``pairs`` is ``exact``
    rounded once to bf16."""
    return ((pairs.double() - exact).abs() / (2 ** -8 * exact.abs() + 1e-4)).max().item()


def test_bf16_pairs_are_the_float32_relation_rounded_once():
    """``dtype=torch.bfloat16``: the pairs are the exact relation of the (rounded) inputs within one bf16
    rounding, as the docstrings say (the relation computed in float32, rounded once at the end). The
    same relations computed in bf16 miss that bound by hundreds of times, so it can tell them apart."""
    x, pos, idx, minus, scale = _setup(channels=20, dtype=torch.float32)
    tables = rotation_tables(pos, scale, x.shape[-1])
    points = apply_shifted(x, tables)
    frame = geope_pairs.frame_pairs(points, idx, tables, minus, torch.bfloat16)
    exact = query_frame(x.double(), idx, pos.double(), scale.double(), minus.double())
    assert frame.dtype == torch.bfloat16 and _one_rounding(frame, exact) <= 1
    assert _one_rounding(geope_pairs.frame_pairs(points.bfloat16(), idx, tables.bfloat16(), minus.bfloat16()),
                         exact) > 10
    disp = pos[idx] - pos[:, None]
    xb, mb = x.bfloat16(), minus.bfloat16()                   # autocast's features, float32 geometry
    linear = geope_pairs.relative_pairs(xb, idx, disp, scale, mb, torch.bfloat16)
    exact = relative_frame(xb.double(), idx, disp.double(), scale.double(), mb.double())
    assert linear.dtype == torch.bfloat16 and _one_rounding(linear, exact) <= 1
    assert _one_rounding(geope_pairs.relative_pairs(xb, idx, disp.bfloat16(), scale.bfloat16(), mb), exact) > 10
