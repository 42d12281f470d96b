"""Tests of pointgeope/model/rope.py (axial 3D RoPE, RoPE-Mixed) and pointgeope/model/ape.py, against
2x2 rotation matrices written from the definition and against GeoPE along one axis."""
from __future__ import annotations

import math

import pytest
import torch

from pointgeope.geope import BlockScale, FixedTables, GeoPE
from pointgeope.model import rope, rotation
from pointgeope.model.ape import absolute_features
from pointgeope.model.network import stage_grid_units
from pointgeope.model.rope import (
    axial_frequencies,
    grid_coordinates,
    mixed_frequencies,
    pair_angles,
    pair_frame,
    pointrope_frequencies,
    pointrope_table,
    rotate_pairs,
)
from tests.model.linear_gradcheck import LINEAR


def axial(channels: int, base: float = 100.0, pos_scale: float = 25.0) -> torch.Tensor:
    return axial_frequencies(BlockScale(channels, base, pos_scale)(torch.float64, torch.device("cpu")), channels)


def _setup(channels, n=30, k=5, seed=0, mixed=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, channels, generator=g, dtype=torch.float64)
    pos = torch.rand(n, 3, generator=g, dtype=torch.float64) * 3
    idx = torch.randint(0, n, (n, k), generator=g)
    freq = axial(channels)
    if mixed:                                   # RoPE-Mixed after some training: every pair mixes the axes
        freq = freq + torch.randn(freq.shape, generator=g, dtype=torch.float64)
    return x, pos, idx, freq


def _turn_by_definition(x, theta):
    """Channel pair p of the vector ``x (C,)`` times the 2x2 matrix [[cos, -sin], [sin, cos]] of ``theta[p]``."""
    y = x.clone()
    for p, t in enumerate(theta.tolist()):
        mat = torch.tensor([[math.cos(t), -math.sin(t)], [math.sin(t), math.cos(t)]], dtype=x.dtype)
        y[2 * p: 2 * p + 2] = mat @ x[2 * p: 2 * p + 2]
    return y


def test_axial_frequencies_are_geope_frequencies_of_the_same_channels_on_one_axis_each():
    freq = axial(64, base=100.0, pos_scale=25.0)
    n = 64 // 3                                                            # GeoPE blocks of the width
    assert freq.shape == (30, 3)                                           # m = 10 blocks of 3 pairs
    for j in range(10):
        k_j = 25.0 * 100.0 ** (-2 * (2 * j) / (3 * n)) / 3
        for a in range(3):
            expected = torch.zeros(3, dtype=torch.float64)
            expected[a] = k_j
            torch.testing.assert_close(freq[3 * j + a], expected, atol=1e-12, rtol=1e-12)
    assert axial(17).shape == (6, 3)                                        # 12 channels turn, 5 pass
    with pytest.raises(ValueError, match="at least 6 channels"):
        axial_frequencies(torch.ones(1), 5)
    scale = torch.ones(5, requires_grad=True)                               # learnable block scales
    axial_frequencies(scale, 16).sum().backward()
    assert scale.grad.tolist() == [3.0, 0.0, 3.0, 0.0, 0.0]                 # blocks 0 and 2, one per axis


@pytest.mark.parametrize("points", [False, True])
@pytest.mark.parametrize("channels,mixed", [(12, False), (16, True), (35, True)])
def test_pair_frame_is_the_query_frame_of_absolute_rotations(channels, mixed, points):
    """``R(theta(p_i))^T R(theta(p_j)) x_j - m_i`` built pair by pair from absolute phases equals the fused
    kernels: the one that turns by the displacement's angles (translation invariance made explicit) and,
    given the positions, the one that turns every point by its own angles and back by the query's."""
    x, pos, idx, freq = _setup(channels, n=8, k=3, mixed=mixed)
    minus = torch.randn(8, channels, dtype=torch.float64)
    out = pair_frame(x, idx, pos[idx] - pos[:, None], freq, minus, pos=pos if points else None)
    for i in range(8):
        for slot, j in enumerate(idx[i].tolist()):
            back = _turn_by_definition(_turn_by_definition(x[j], freq @ pos[j]), -(freq @ pos[i]))
            torch.testing.assert_close(out[i, slot], back - minus[i], atol=1e-12, rtol=0)
    rest = 2 * freq.shape[0]
    torch.testing.assert_close(out[..., rest:], x[idx][..., rest:] - minus[:, None, rest:], atol=0, rtol=0)


@pytest.mark.parametrize("points", [False, True])
@pytest.mark.parametrize("channels", [12, 32, 35])
def test_fused_steps_match_the_autograd_formula(channels, points, monkeypatch):
    monkeypatch.setattr(rotation, "_STEP_ELEMENTS", 500)                  # several query steps
    x, pos, idx, freq = _setup(channels, n=50, k=6, mixed=True)
    disp, given = pos[idx] - pos[:, None], pos if points else None
    minus = torch.randn(50, channels, dtype=torch.float64)
    fused = pair_frame(x, idx, disp, freq, minus, pos=given)
    torch.testing.assert_close(fused, rotate_pairs(x[idx], disp, freq) - minus[:, None], atol=1e-12, rtol=0)
    torch.testing.assert_close(pair_frame(x, idx, disp, freq, pos=given), rotate_pairs(x[idx], disp, freq),
                               atol=1e-12, rtol=0)


def test_float32_per_point_angles_stay_within_geope_rounding():
    """Per-point angles of positions tens of metres from the origin (hundreds of radians) are rounded by
    float32 to a few units in the last place of ``theta``, as GeoPE's: the relation stays within a bound of
    eight such roundings (the position, both angles, the sines and cosines) times the largest feature."""
    x, pos, idx, freq = _setup(48, n=40, k=8)
    pos = pos * 10 + 20                                                    # 20-50 m from the origin
    exact = pair_frame(x, idx, pos[idx] - pos[:, None], freq, pos=pos)
    single = pair_frame(x.float(), idx, (pos[idx] - pos[:, None]).float(), freq.float(), pos=pos.float())
    theta = (freq.abs().sum(1).max() * pos.abs().max()).item()
    assert theta > 300                                                     # the angles are that large
    bound = 8 * (torch.finfo(torch.float32).eps / 2) * theta * x.abs().max().item()
    assert (single.double() - exact).abs().max() < bound < 1e-3


def test_autocast_rounds_no_angle_to_bfloat16():
    """Under bfloat16 autocast (``train.amp=bf16``) a matmul would return the angles in bfloat16, off by up
    to a quarter radian at 60 rad; the angles and APE's sinusoids stay what float32 gives."""
    pos, freq = torch.rand(100, 3) * 20, axial(48).float()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside, waves = pair_angles(pos, freq), absolute_features(pos, freq, 48)
    assert inside.dtype == torch.float32
    torch.testing.assert_close(inside, pos @ freq.T, atol=0, rtol=0)
    torch.testing.assert_close(waves, absolute_features(pos, freq, 48), atol=0, rtol=0)


@pytest.mark.parametrize("mixed,points", [(False, False), (True, False), (False, True)])
def test_gradients_of_features_frequencies_and_query(mixed, points, monkeypatch):
    monkeypatch.setattr(rotation, "_STEP_ELEMENTS", 64)
    x, pos, idx, freq = _setup(14, n=10, k=4, mixed=mixed)
    disp, given = pos[idx] - pos[:, None], pos if points else None
    minus = torch.randn(10, 14, dtype=torch.float64, requires_grad=True)
    x.requires_grad_()
    freq.requires_grad_(mixed)

    def relation(a, m, *learnt):                   # learnt: the frequencies, when RoPE-Mixed learns them
        return pair_frame(a, idx, disp, learnt[0] if learnt else freq, m, pos=given)

    inputs = (x, minus, freq) if mixed else (x, minus)
    # linear in (x, minus): linear_gradcheck.py's fast mode; the frequencies enter nonlinearly: their full Jacobian
    assert torch.autograd.gradcheck(lambda a, m: relation(a, m, *inputs[2:]), (x, minus), **LINEAR)
    if mixed:
        assert torch.autograd.gradcheck(lambda f: relation(x.detach(), minus.detach(), f), (freq,))
    # the lean Function and plain autograd (taken when the displacements need a gradient) agree
    weight = torch.randn(10, 4, 14, dtype=torch.float64)
    lean = torch.autograd.grad((relation(*inputs) * weight).sum(), inputs)
    plain = torch.autograd.grad((pair_frame(x, idx, disp.clone().requires_grad_(), freq, minus) * weight).sum(),
                                inputs)
    for a, b in zip(lean, plain, strict=True):
        torch.testing.assert_close(a, b, atol=1e-10, rtol=1e-10)


def test_backward_saves_nothing_of_pair_size():
    n, k, c = 64, 16, 48
    x, pos, idx, freq = _setup(c, n=n, k=k)
    disp = pos[idx] - pos[:, None]
    x.requires_grad_()
    for learnable, given, limit in ((False, None, n * k * 3), (True, None, n * c), (False, pos, n * k)):
        saved = []                                                          # x itself when frequencies learn
        with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t.numel()) or t,  # noqa: B023
                                                      lambda t: t):  # (the hooks live inside this iteration's block)
            pair_frame(x, idx, disp, freq.clone().requires_grad_(learnable), pos=given)
        assert max(saved) <= limit, saved


def test_single_axis_turn_equals_geope_and_axes_do_not_couple():
    """Along one axis, rope3d turns the pair of that axis by the angle by which GeoPE turns the block of
    the same channels about that axis; for a general displacement rope3d is the product of the three
    single-axis turns (they commute), GeoPE is not (its axes couple)."""
    channels, d = 36, 0.37
    freq = axial(channels)
    geope = GeoPE(channels, pos_scale=25.0).double()
    for a in range(3):
        disp = torch.zeros(1, 1, 3, dtype=torch.float64)
        disp[..., a] = d
        for j in range(channels // 6):
            e, f = (a + 1) % 3, (a + 2) % 3                # GeoPE about axis a turns (v_e, v_f) by phi
            v = torch.zeros(1, 1, channels, dtype=torch.float64)
            v[..., 6 * j + e] = 1.0                         # GeoPE block 2j = channels 6j .. 6j+2
            turned = geope.relative(v, torch.zeros_like(disp), disp, linear=True)[0, 0, 6 * j: 6 * j + 3]
            phi = math.atan2(turned[f].item(), turned[e].item())
            u = torch.zeros(1, channels, dtype=torch.float64)
            u[0, 2 * (3 * j + a)] = 1.0                     # first channel of the pair of axis a in block j
            rope = rotate_pairs(u, disp[0], freq)[0]
            theta = math.atan2(rope[2 * (3 * j + a) + 1].item(), rope[2 * (3 * j + a)].item())
            assert abs(theta - phi) < 1e-12
    x = torch.randn(1, channels, dtype=torch.float64)
    full = torch.tensor([[0.3, -0.8, 1.1]], dtype=torch.float64)
    steps = torch.diag(full[0]).unsqueeze(1)                                 # (3, 1, 3): one axis each
    chained = x
    for step in (steps[2], steps[0], steps[1]):
        chained = rotate_pairs(chained, step, freq)
    torch.testing.assert_close(rotate_pairs(x, full, freq), chained, atol=1e-12, rtol=0)
    chained = x
    for step in (steps[2], steps[0], steps[1]):
        chained = geope(chained, step)
    assert (geope(x, full) - chained).abs().max() > 1e-2


def test_half_precision_features_are_turned_by_float32_angles():
    """Angles reach hundreds of radians (metres in voxel units); bfloat16 angles would be off by ~1 rad.
    Features may be bfloat16, the angles are not: the error stays at bfloat16's resolution."""
    x, pos, idx, freq = _setup(33, n=200, k=8, seed=3, mixed=True)
    disp = (pos[idx] - pos[:, None]) * 3                                     # up to ~9 m
    exact = pair_frame(x, idx, disp, freq)
    half = pair_frame(x.bfloat16(), idx, disp.float(), freq.float())
    assert half.dtype == torch.bfloat16
    err = ((half.double() - exact).norm() / exact.norm()).item()
    rounding = ((x.bfloat16().double() - x).norm() / x.norm()).item()
    assert err < 1.6 * rounding, (err, rounding)


def test_absolute_features_are_sinusoids_of_the_pair_angles():
    channels = 16                                                            # 2 blocks: 12 waves, 4 zeros
    freq = axial(channels)
    pos = torch.tensor([[0.0, 0.0, 0.0], [0.12, -0.5, 2.0]], dtype=torch.float64)
    e = absolute_features(pos, freq, channels)
    assert e.shape == (2, 16) and e.dtype == torch.float64
    torch.testing.assert_close(e[0, :12], torch.tensor([1.0, 0.0] * 6, dtype=torch.float64))
    k1 = 25.0 * 100.0 ** (-2 * 2 / (3 * 5)) / 3                               # block 1: GeoPE block 2 of 5
    torch.testing.assert_close(e[1, 8:10], torch.tensor([math.cos(-0.5 * k1), math.sin(-0.5 * k1)],
                                                        dtype=torch.float64))
    assert torch.equal(e[:, 12:], torch.zeros(2, 4, dtype=torch.float64))
    # e(p) = R(theta(p)) applied to (1, 0) in every pair
    ones = torch.tensor([1.0, 0.0] * 6 + [0.0] * 4, dtype=torch.float64).expand(2, -1)
    torch.testing.assert_close(e, rotate_pairs(ones, pos, freq), atol=1e-14, rtol=0)
    assert absolute_features(pos.float(), freq, channels, torch.bfloat16).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="at most 2 frequency pairs"):
        absolute_features(pos, freq, 5)


def test_pointrope_frequencies_are_litepts():
    """LitePT's kernel turns pair ``d`` of ``D`` per axis by ``p / base ** (d / D)`` radians at the integer
    grid coordinate ``p``: here pair ``3d + a`` turns about axis ``a`` only, by ``100 ** (-d / D)``."""
    freq = pointrope_frequencies(40)                                        # D = 40 // 6 = 6, 36 channels turn
    assert freq.shape == (18, 3) and freq.dtype == torch.float64
    for d in range(6):
        for a in range(3):
            expected = [0.0, 0.0, 0.0]
            expected[a] = 1.0 / 100.0 ** (d / 6)
            assert freq[3 * d + a].tolist() == pytest.approx(expected, rel=1e-15, abs=0)
    assert freq[0, 0] == 1.0 and freq[-1, 2] == pytest.approx(100 ** (-5 / 6))   # 1 .. 100^(-(D-1)/D) rad/cell
    assert pointrope_frequencies(12, base=10.0)[3].tolist() == pytest.approx([10 ** -0.5, 0, 0])
    with pytest.raises(ValueError, match="at least 6 channels"):
        pointrope_frequencies(5)


@pytest.fixture
def pointrope_made(monkeypatch) -> list:
    """The calls of ``pointrope_frequencies`` that ``pointrope_table`` makes, from an empty cache."""
    made = []
    monkeypatch.setattr(rope, "_POINTROPE_TABLES", FixedTables())
    monkeypatch.setattr(rope, "pointrope_frequencies",
                        lambda *a, _f=rope.pointrope_frequencies, **kw: made.append((a, kw)) or _f(*a, **kw))
    return made


def test_pointrope_table_is_the_formula_bit_for_bit_made_once(pointrope_made):
    """The one cached table of PTv1, the PyG layer and PTv3: the bits of ``pointrope_frequencies`` in the dtype
    and on the device asked (what ``attention.pair_frequencies`` built at every call before), made on the
    first call of each ``(channels, base, dtype, device)``; later calls return the kept tensor."""
    cpu = torch.device("cpu")
    for channels, base, dtype in ((40, 100.0, torch.float32), (40, 100.0, torch.float64), (18, 10.0, torch.float32)):
        table = pointrope_table(channels, base, dtype, cpu)
        expected = pointrope_frequencies(channels, base, dtype=dtype, device=cpu)
        assert table.dtype == dtype and torch.equal(table, expected)
    assert len(pointrope_made) == 3                                       # one a table (the spy sees none of expected)
    again = pointrope_table(40, 100.0, torch.float32, cpu)
    assert len(pointrope_made) == 3 and again is pointrope_table(40, 100.0, torch.float32, "cpu")


def test_pointrope_table_made_in_inference_mode_serves_training(pointrope_made):
    """A table first made under ``torch.inference_mode`` (an evaluation before any training step) is an ordinary
    tensor: a later step saves it for its backward (an inference tensor would raise there)."""
    disp = torch.randn(5, 3, dtype=torch.float64)
    with torch.inference_mode():
        pointrope_table(12)
    x = torch.randn(5, 12, dtype=torch.float64, requires_grad=True)
    rotate_pairs(x, disp.requires_grad_(), pointrope_table(12)).sum().backward()
    assert len(pointrope_made) == 1 and x.grad is not None and disp.grad is not None


def test_grid_coordinates_are_integer_cells():
    coord = torch.tensor([[0.05, -0.01, 0.2], [0.0, 0.0399, -0.04]])
    grid = grid_coordinates(coord, 0.04, torch.float32)
    assert grid.tolist() == [[1.0, -1.0, 5.0], [0.0, 0.0, -1.0]] and grid.dtype == torch.float32
    # a shift by whole cells shifts the cells; LitePT's per-cloud minimum cancels in g_j - g_i
    shifted = grid_coordinates(coord + torch.tensor([0.5, 1.0, -0.25]), 0.25, torch.float64)
    torch.testing.assert_close(shifted - grid_coordinates(coord, 0.25, torch.float64),
                               torch.tensor([[2.0, 4.0, -1.0]] * 2, dtype=torch.float64), atol=0, rtol=0)


def test_stage_grid_units_grow_as_the_spacing_of_fps_samples_on_a_surface():
    assert stage_grid_units(0.04, (1, 4, 4, 4, 4)) == pytest.approx([0.04, 0.08, 0.16, 0.32, 0.64])
    assert stage_grid_units(0.1, (1, 9, 4)) == pytest.approx([0.1, 0.3, 0.6])


def test_mixed_frequencies_are_a_random_rotation_of_the_axial_layout_at_base_10():
    """RoPE-Mixed's init: the pairs of one magnitude ``pos_scale 10^(-q/Q)`` point along three orthonormal
    directions (a rotation, det +1), the same for every magnitude; another draw gives another rotation."""
    freq = mixed_frequencies(36, pos_scale=12.5, generator=torch.Generator().manual_seed(0)).double()
    assert freq.shape == (18, 3)
    frames = freq.reshape(6, 3, 3)                                          # (q, axis a, direction)
    for q in range(6):
        magnitude = 12.5 * 10.0 ** (-q / 6)
        rot = frames[q] / magnitude
        torch.testing.assert_close(rot @ rot.T, torch.eye(3, dtype=torch.float64), atol=1e-6, rtol=0)
        assert torch.linalg.det(rot).item() == pytest.approx(1.0, abs=1e-6)
        torch.testing.assert_close(rot, frames[0] / 12.5, atol=1e-6, rtol=0)
    assert (frames[0] / 12.5 - torch.eye(3, dtype=torch.float64)).abs().max() > 1e-2   # not the axial layout
    other = mixed_frequencies(36, pos_scale=12.5, generator=torch.Generator().manual_seed(1))
    assert (other.double() - freq).abs().max() > 1e-2
    # Haar: over many draws a fixed axis is sent anywhere on the sphere, its mean direction near zero
    g = torch.Generator().manual_seed(2)
    firsts = torch.stack([mixed_frequencies(6, 1.0, generator=g)[0] for _ in range(2000)]).double()
    assert firsts.mean(0).abs().max() < 0.05 and (firsts.square().mean(0) - 1 / 3).abs().max() < 0.03
