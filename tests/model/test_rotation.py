"""Tests of pointgeope/model/rotation.py against pointgeope.geope, and of its memory-lean gradients."""
from __future__ import annotations

import pytest
import torch

from pointgeope.geope import GeoPE, frequencies
from pointgeope.model import stage_memo
from pointgeope.model.linear_rotation import relative_blocks, relative_frame, rotate_relative
from pointgeope.model.rotation import (
    apply_shifted,
    block_rotations,
    query_frame,
    rotate_blocks,
    rotation_tables,
    shift_tables,
)
from tests.conftest import cuda_devices
from tests.model.linear_gradcheck import LINEAR


def _setup(channels, n=40, k=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, channels, generator=g, dtype=torch.float64)
    pos = torch.rand(n, 3, generator=g, dtype=torch.float64) * 3
    idx = torch.randint(0, n, (n, k), generator=g)
    return x, pos, idx, frequencies(channels) * 25.0 / 3


@pytest.mark.parametrize("channels", [30, 32, 33])
def test_standard_and_linear_match_geope(channels):
    x, pos, idx, scale = _setup(channels)
    pe = GeoPE(channels, pos_scale=25.0)
    mats = block_rotations(pos, scale)
    torch.testing.assert_close(rotate_blocks(x, mats, pos, scale), pe(x, pos), atol=1e-12, rtol=0)
    frame = rotate_blocks(rotate_blocks(x, mats, pos, scale)[idx], mats, pos, scale, inverse=True)
    torch.testing.assert_close(frame, pe.relative(x[idx], pos[:, None], pos[idx]), atol=1e-12, rtol=0)
    disp = pos[idx] - pos[:, None]
    torch.testing.assert_close(relative_blocks(x[idx], disp, scale),
                               pe.relative(x[idx], pos[:, None], pos[idx], linear=True), atol=1e-12, rtol=0)
    # pass-through channels untouched
    assert torch.equal(frame[..., 3 * (channels // 3):], x[idx][..., 3 * (channels // 3):])


def test_gradients_are_the_inverse_rotations():
    x, pos, idx, scale = _setup(11, n=12, k=4)
    mats = block_rotations(pos, scale)
    disp = pos[idx] - pos[:, None]
    x = x.requires_grad_()
    assert torch.autograd.gradcheck(
        lambda a: rotate_blocks(rotate_blocks(a, mats, pos, scale)[idx], mats, pos, scale, inverse=True), (x,),
        **LINEAR)
    assert torch.autograd.gradcheck(lambda a: rotate_relative(a[idx], disp, scale), (x,), **LINEAR)


def test_learnable_frequencies_take_the_autograd_path_and_agree():
    x, pos, idx, scale = _setup(9, n=10, k=3)
    scale = scale.clone().requires_grad_()
    disp = pos[idx] - pos[:, None]
    out = rotate_relative(x[idx], disp, scale)
    torch.testing.assert_close(out, relative_blocks(x[idx], disp, scale.detach()))
    out.sum().backward()
    assert scale.grad is not None and torch.isfinite(scale.grad).all()
    mats = block_rotations(pos, scale)
    out = rotate_blocks(x[idx], mats, pos, scale, inverse=True)
    torch.testing.assert_close(out, rotate_blocks(x[idx], mats.detach(), pos, scale.detach(), inverse=True))
    assert out.requires_grad


def test_backward_saves_nothing_of_pair_size():
    n, k, c = 64, 16, 48
    x, pos, idx, scale = _setup(c, n=n, k=k)
    mats = block_rotations(pos, scale)
    disp = pos[idx] - pos[:, None]
    x = x.requires_grad_()
    for fn in (lambda: rotate_blocks(rotate_blocks(x, mats, pos, scale)[idx], mats, pos, scale, inverse=True),
               lambda: rotate_relative(x[idx], disp, scale)):
        saved = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t,  # noqa: B023
                                                      lambda t: t):  # (the hooks live inside this iteration's block)
            fn()
        assert max(saved) <= n * k * 3, saved      # positions (N, 3), displacements (N, k, 3), indices (N, k)


def test_half_precision_vectors_are_turned_by_float32_angles():
    """Phases reach hundreds of radians; bfloat16 angles would be off by ~1 rad. The vectors may be
    bfloat16, the angles are not: the error stays at bfloat16's resolution of the vectors."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(50, 4, 33, generator=g, dtype=torch.float64)
    disp = (torch.rand(50, 4, 3, generator=g, dtype=torch.float64) - 0.5) * 6        # up to 3 m
    scale = frequencies(33) * 25.0 / 3
    exact = relative_blocks(x, disp, scale)
    half = relative_blocks(x.bfloat16(), disp.float(), scale.float())
    assert half.dtype == torch.bfloat16
    assert (half.double() - exact).abs().max() < 0.05 * exact.abs().max()


def _relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


@pytest.mark.parametrize("device", cuda_devices())
def test_half_precision_rotation_adds_one_rounding(device):
    """Under mixed precision the keys arrive in bfloat16 (one rounding, relative error ~1.7e-3). The
    rotation is computed in float32 and rounded once at the end: independent roundings add in
    quadrature, so the rotated keys carry about sqrt(2) times the key's own error (< 1.6x). Rotating in
    bfloat16 (three more roundings per component) gave 1.9-2.5x."""
    g = torch.Generator().manual_seed(11)
    n, k, c = 3000, 8, 64
    x = torch.randn(n, c, generator=g, dtype=torch.float64)
    pos = torch.rand(n, 3, generator=g, dtype=torch.float64) * 8                      # up to 8 m: ~200 rad
    idx = torch.randint(0, n, (n, k), generator=g)
    scale = frequencies(c) * 25.0 / 3
    x16 = x.to(device, torch.bfloat16)
    rounding = _relative_error(x16, x.to(device))
    pos32, scale32 = pos.to(device, torch.float32), scale.to(device, torch.float32)
    mats32 = block_rotations(pos32, scale32)
    mats64 = block_rotations(pos, scale)
    exact = rotate_blocks(rotate_blocks(x, mats64, pos, scale)[idx], mats64, pos, scale, inverse=True)
    half = rotate_blocks(rotate_blocks(x16, mats32, pos32, scale32)[idx.to(device)], mats32, pos32, scale32,
                         inverse=True)
    assert half.dtype == torch.bfloat16
    # standard GeoPE rounds twice (rotated points, then the pairs): at most sqrt(3) in quadrature
    assert _relative_error(half.cpu(), exact) < 1.9 * rounding
    disp = pos[idx] - pos[:, None]
    exact = relative_blocks(x[idx], disp, scale)
    half = relative_blocks(x16[idx.to(device)], disp.to(device, torch.float32), scale32)
    assert half.dtype == torch.bfloat16
    assert _relative_error(half.cpu(), exact) < 1.6 * rounding


@pytest.mark.parametrize("channels", [30, 31, 32])
def test_shift_tables_apply_every_block_matrix(channels):
    """``apply_shifted`` with ``shift_tables`` equals the block matrices applied as 3x3 products."""
    g = torch.Generator().manual_seed(21)
    n = channels // 3
    mats = torch.randn(7, 5, n, 3, 3, generator=g, dtype=torch.float64)        # any matrices, not only rotations
    x = torch.randn(7, 5, channels, generator=g, dtype=torch.float64)
    minus = torch.randn(7, 5, channels, generator=g, dtype=torch.float64)
    expected = x.clone()
    expected[..., : 3 * n] = (mats @ x[..., : 3 * n].unflatten(-1, (n, 3)).unsqueeze(-1)).squeeze(-1).flatten(-2)
    torch.testing.assert_close(apply_shifted(x, shift_tables(mats, channels)), expected, atol=1e-12, rtol=0)
    torch.testing.assert_close(apply_shifted(x, shift_tables(mats, channels), minus), expected - minus,
                               atol=1e-12, rtol=0)


def _check_relation(fn, x: torch.Tensor, q: torch.Tensor, expected: torch.Tensor, max_saved: int) -> None:
    """``fn(x, q)`` equals ``expected`` (and ``fn(x, None)`` adds ``q`` back), has the gradients of its values
    in ``x`` and ``q`` (gradcheck) and saves no tensor larger than ``max_saved`` elements for the backward."""
    torch.testing.assert_close(fn(x, q), expected, atol=1e-12, rtol=0)
    torch.testing.assert_close(fn(x, None), expected + q[:, None], atol=1e-12, rtol=0)
    x, q = x.requires_grad_(), q.requires_grad_()
    assert torch.autograd.gradcheck(fn, (x, q), **LINEAR)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
        fn(x, q)
    assert max(saved) <= max_saved, saved


@pytest.mark.parametrize("channels", [9, 10, 11])
def test_query_frame_is_standard_geope_relative_minus_the_query_with_its_gradients(channels):
    x, pos, idx, scale = _setup(channels, n=12, k=4, seed=5)
    q = torch.randn(12, channels, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    expected = GeoPE(channels, pos_scale=25.0).relative(x[idx], pos[:, None], pos[idx]) - q[:, None]
    # saved: indices and positions only, no (N, k, C) pairs
    _check_relation(lambda a, b: query_frame(a, idx, pos, scale, b), x, q, expected, max_saved=12 * 4)


def test_rotation_tables_are_the_shift_tables_of_the_block_rotations_and_transpose_inverts():
    x, pos, idx, scale = _setup(32, n=20, seed=9)
    pos[3] = 0                                           # the origin: R = I exactly
    tables = rotation_tables(pos, scale, 32)
    torch.testing.assert_close(tables, shift_tables(block_rotations(pos, scale), 32), atol=1e-14, rtol=0)
    torch.testing.assert_close(apply_shifted(apply_shifted(x, tables), tables, transpose=True), x, atol=1e-12, rtol=0)
    assert torch.equal(apply_shifted(x, tables)[3], x[3])


@pytest.mark.parametrize("channels", [10, 11, 12])
def test_relative_frame_is_gather_linear_rotation_subtract_with_its_gradients(channels):
    x, pos, idx, scale = _setup(channels, n=12, k=4, seed=7)
    q = torch.randn(12, channels, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    disp = pos[idx] - pos[:, None]
    expected = GeoPE(channels, pos_scale=25.0).relative(x[idx], pos[:, None], pos[idx], linear=True) - q[:, None]
    # saved: indices and displacements only
    _check_relation(lambda a, b: relative_frame(a, idx, disp, scale, b), x, q, expected, max_saved=12 * 4 * 3)


def test_steps_of_queries_give_the_same_values_and_gradients(monkeypatch):
    """The fused Functions work through the pairs in steps of queries (cache-sized); tiny steps (one or
    two queries) must give what one step gives."""
    import pointgeope.model.rotation as rotation

    x, pos, idx, scale = _setup(11, n=30, k=5, seed=10)
    q = torch.randn(30, 11, generator=torch.Generator().manual_seed(11), dtype=torch.float64)
    disp = pos[idx] - pos[:, None]

    def run():
        a, b = x.clone().requires_grad_(), q.clone().requires_grad_()
        out = query_frame(a, idx, pos, scale, b) + relative_frame(a, idx, disp, scale, b)
        out.backward(torch.ones_like(out))
        return out.detach(), a.grad, b.grad

    whole = run()
    monkeypatch.setattr(rotation, "_STEP_ELEMENTS", 2 * 5 * 11)
    assert len(rotation.query_steps(30, 5, 11, torch.device("cpu"))) == 15
    for got, want in zip(run(), whole, strict=True):
        torch.testing.assert_close(got, want, atol=1e-12, rtol=0)


def test_stage_memo_shares_rotation_tables_build_once_per_inputs_and_again_after_a_write():
    _, pos, _, scale = _setup(12, n=15, seed=3)
    fresh = rotation_tables(pos, scale, 12)
    assert rotation_tables(pos, scale, 12) is not fresh                   # outside the block: a table per call
    with stage_memo.shared():
        first = rotation_tables(pos, scale, 12)
        assert torch.equal(first, fresh)
        assert rotation_tables(pos, scale, 12) is first
        assert rotation_tables(pos.clone(), scale, 12) is not first         # another tensor, equal values
        assert rotation_tables(pos, scale.clone(), 12) is not first
        assert rotation_tables(pos, scale, 15).shape == (5, 15, 15)         # another width
        pos[0] += 1.0                                                       # written: its version moves on
        moved = rotation_tables(pos, scale, 12)
        assert moved is not first and not torch.equal(moved[:, 0], first[:, 0])
        assert torch.equal(moved[:, 1:], first[:, 1:])
    assert rotation_tables(pos, scale, 12) is not moved                     # the memo ends with the block


def test_stage_memo_shares_rotation_tables_take_inference_tensors():
    with torch.inference_mode():
        _, pos, _, scale = _setup(9, n=10, seed=4)
        with stage_memo.shared():
            assert rotation_tables(pos, scale, 9) is rotation_tables(pos, scale, 9)


def test_block_scales_of_equal_settings_are_one_tensor():
    from pointgeope.geope import BlockScale

    a, b, c = BlockScale(12, pos_scale=25.0), BlockScale(12, pos_scale=25.0), BlockScale(12, pos_scale=50.0)
    dev = torch.device("cpu")
    assert a(torch.float32, dev) is b(torch.float32, dev)
    assert a(torch.float32, dev) is not c(torch.float32, dev)
    assert a(torch.float64, dev) is not a(torch.float32, dev)
    torch.testing.assert_close(c(torch.float64, dev), 2 * a(torch.float64, dev), rtol=1e-15, atol=0)


def _tables_entry_by_entry(pos, block_scale, channels):
    """The shift tables by their definition, one 3x3 entry at a time: ``T_{e-d}[i, 3b + d] = R_b(p_i)[d, e]``,
    ``R[d, e] = cos delta_de + sin [u]_x[d, e] + (1 - cos) u_d u_e`` (the diagonal by ``addcmul``, the others by
    ``mul`` then ``addcmul_``: the arithmetic of a GPU's kernels, entry by entry)."""
    from pointgeope.geope import rotation_terms

    u, cos, sin, versine = rotation_terms(pos, block_scale)
    n = block_scale.shape[0]
    tables = pos.new_zeros(5, pos.shape[0], channels)
    ux, uy, uz = u[:, 0:1], u[:, 1:2], u[:, 2:3]
    cross = {(0, 1): -uz, (0, 2): uy, (1, 0): uz, (1, 2): -ux, (2, 0): -uy, (2, 1): ux}
    for b in range(n):
        for d in range(3):
            for e in range(3):
                uu = u[:, d] * u[:, e]
                if d == e:
                    entry = torch.addcmul(cos[:, b], versine[:, b], uu)
                else:
                    entry = torch.mul(versine[:, b], uu).addcmul_(sin[:, b], cross[d, e][:, 0])
                tables[e - d + 2, :, 3 * b + d] = entry
    tables[2, :, 3 * n:] = 1
    return tables


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("channels", [3, 30, 32, 34])
def test_tables_are_every_entry_of_the_definition_bit_for_bit(channels, dtype):
    """The tables written a shift at a time hold exactly the entries computed one at a time (a point at the
    origin included: R = I there), in float32 and float64."""
    _, pos, _, scale = _setup(channels, n=23, seed=5)
    pos, scale = pos.to(dtype), scale.to(dtype)
    pos[3] = 0.0
    got = rotation_tables(pos, scale, channels)
    assert torch.equal(got, _tables_entry_by_entry(pos, scale, channels))
    identity = torch.zeros(5, channels, dtype=dtype)
    identity[2] = 1
    assert torch.equal(got[:, 3], identity)                              # R = I at the origin
