"""Tests of pointgeope/model/rotation.py against pointgeope.geope, and of its memory-lean gradients."""
from __future__ import annotations

import pytest
import torch

from pointgeope.geope import GeoPE, frequencies
from pointgeope.model.rotation import block_rotations, relative_blocks, rotate_blocks, rotate_relative
from tests.conftest import cuda_devices


def _setup(channels, n=40, k=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, channels, generator=g, dtype=torch.float64)
    pos = torch.rand(n, 3, generator=g, dtype=torch.float64) * 3
    idx = torch.randint(0, n, (n, k), generator=g)
    return x, pos, idx, frequencies(channels) * 25.0


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
        lambda a: rotate_blocks(rotate_blocks(a, mats, pos, scale)[idx], mats, pos, scale, inverse=True), (x,))
    assert torch.autograd.gradcheck(lambda a: rotate_relative(a[idx], disp, scale), (x,))


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
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t, lambda t: t):
            fn()
        assert max(saved) <= n * k * 3, saved      # positions (N, 3), displacements (N, k, 3), indices (N, k)


def test_half_precision_vectors_are_turned_by_float32_angles():
    """Phases reach hundreds of radians; bfloat16 angles would be off by ~1 rad. The vectors may be
    bfloat16, the angles are not: the error stays at bfloat16's resolution of the vectors."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(50, 4, 33, generator=g, dtype=torch.float64)
    disp = (torch.rand(50, 4, 3, generator=g, dtype=torch.float64) - 0.5) * 6        # up to 3 m
    scale = frequencies(33) * 25.0
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
    scale = frequencies(c) * 25.0
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
