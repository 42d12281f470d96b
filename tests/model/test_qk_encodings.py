"""Tests of pointgeope/model/qk_encodings.py: every encoding against a reference written from its authors'
definition (tests/model/qk_reference.py), and the properties each claims. The per-token kernels' own tests:
test_qk_kernels.py; LinGeoPE's attention: test_qk_lingeope.py; Utonia's augmentation: test_coord_augment.py."""
from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F

from pointgeope.model.qk_encodings import (
    QK_ENCODINGS,
    ROTARY_HEAD_DIM,
    AxialRoPEQK,
    GeoPEQK,
    Point3DRoPEQK,
    qk_encoding,
    rotary_channels,
)
from pointgeope.model.rope import pointrope_frequencies, rotate_pairs
from tests.conftest import cuda_devices
from tests.model.qk_reference import F64, ROTARY, inputs, reference, thirds_reference

# ---- each encoding against its reference ------------------------------------------------------------------


@pytest.mark.parametrize("device", cuda_devices())
@pytest.mark.parametrize("name, head_dim", [(name, d) for name in ROTARY for d in (ROTARY_HEAD_DIM, 16, 12)]
                         + [("geope", 7), ("geope", 3)])
def test_rotation_matches_reference(name, head_dim, device):
    q, k, _, coord, grid = inputs(d=head_dim, device=device)
    enc = qk_encoding(name, head_dim).eval().to(device)
    q_out, k_out = enc(q, k, coord, grid)
    torch.testing.assert_close(q_out, reference(name, q, coord, grid), atol=1e-10, rtol=0)
    torch.testing.assert_close(k_out, reference(name, k, coord, grid), atol=1e-10, rtol=0)


def test_pass_through_channels_of_head_width_16():
    q, k, _, coord, grid = inputs(d=16)
    for name, rotated in (("geope", 15), ("rope3d", 12), ("point3drope", 12), ("pointrope", 12)):
        q_out, _ = qk_encoding(name, 16).eval()(q, k, coord, grid)
        assert torch.equal(q_out[..., rotated:], q[..., rotated:])
        assert not torch.allclose(q_out[..., :rotated], q[..., :rotated])


def test_frequencies_are_the_authors():
    # Utonia: inv_freq = 10 ** -(arange(0, 6, 2) / 6) for a head of 18; LitePT: 100 ** -(q / 3), q < 3
    x = torch.zeros(1, 1, 1, 18, dtype=F64)
    x[..., 1] = 1.0                                      # x-third, pair q = 1: channel 1 with channel 4
    pos = torch.tensor([[[1.0, 0.0, 0.0]]], dtype=F64)
    out, _ = Point3DRoPEQK(18).eval()(x, x, pos)
    angle = 10 ** (-2 / 6)
    assert out[0, 0, 0, 1].item() == pytest.approx(math.cos(angle), abs=1e-12)
    assert out[0, 0, 0, 4].item() == pytest.approx(math.sin(angle), abs=1e-12)
    out, _ = qk_encoding("pointrope", 18).eval()(x, x, None, pos.long())
    assert out[0, 0, 0, 4].item() == pytest.approx(math.sin(100 ** (-1 / 3)), abs=1e-12)


@pytest.mark.parametrize("name", ROTARY)
def test_attention_is_sdpa_of_the_rotated_pair(name):
    q, k, v, coord, grid = inputs()
    enc = qk_encoding(name, ROTARY_HEAD_DIM).eval()
    expected = F.scaled_dot_product_attention(reference(name, q, coord, grid), reference(name, k, coord, grid), v)
    torch.testing.assert_close(enc.attention(q, k, v, coord, grid), expected, atol=1e-10, rtol=0)


# ---- properties ---------------------------------------------------------------------------------------------

def _scores(name, q, k, coord, grid):
    enc = qk_encoding(name, q.shape[-1]).eval()
    if name == "lingeope":                          # scores through attention with v = one-hot keys: log-ratios
        v = torch.eye(q.shape[2], dtype=q.dtype).expand(*q.shape[:2], -1, -1)
        weights = enc.attention(q, k, v, coord, grid, scale=1.0)
        return weights.log() - weights.log()[..., :1]
    q, k = enc(q, k, coord, grid)
    s = q @ k.transpose(-1, -2)
    return s - s[..., :1]


@pytest.mark.parametrize("name", ["lingeope", "rope3d", "point3drope", "pointrope", "geope"])
def test_scores_depend_on_offsets_where_claimed(name):
    q, k, _, coord, grid = inputs(length=8)
    shift = torch.tensor([3.7, -12.25, 0.9], dtype=F64)
    moved_coord, moved_grid = coord + shift, grid + torch.tensor([5, -40, 13])
    before, after = _scores(name, q, k, coord, grid), _scores(name, q, k, moved_coord, moved_grid)
    if name == "geope":                             # standard GeoPE is not translation invariant (the spec)
        assert (after - before).abs().max() > 1.0
    else:
        torch.testing.assert_close(after, before, atol=1e-8, rtol=0)


@pytest.mark.parametrize("name", ROTARY)
def test_norms_are_preserved(name):
    q, k, _, coord, grid = inputs(d=16)
    q_out, k_out = qk_encoding(name, 16).eval()(q, k, coord, grid)
    torch.testing.assert_close(q_out.norm(dim=-1), q.norm(dim=-1), atol=1e-12, rtol=0)
    torch.testing.assert_close(k_out.norm(dim=-1), k.norm(dim=-1), atol=1e-12, rtol=0)


@pytest.mark.parametrize("device", cuda_devices())
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("name", ROTARY)
def test_half_inputs_are_turned_in_float32_and_rounded_once(name, dtype, device):
    q, k, _, coord, grid = inputs(dtype=torch.float32, device=device)
    q, k = q.to(dtype), k.to(dtype)
    enc = qk_encoding(name, ROTARY_HEAD_DIM).eval().to(device)
    q_out, k_out = enc(q, k, coord, grid)
    q_32, k_32 = enc(q.float(), k.float(), coord, grid)
    assert q_out.dtype == dtype and torch.equal(q_out, q_32.to(dtype)) and torch.equal(k_out, k_32.to(dtype))


@pytest.mark.parametrize("name", QK_ENCODINGS)
def test_autocast_changes_no_rotation(name):
    q, k, v, coord, grid = inputs(dtype=torch.float32)
    enc = qk_encoding(name, ROTARY_HEAD_DIM).eval()
    run = (lambda: enc.attention(q, k, v, coord, grid)) if name == "lingeope" else (lambda: enc(q, k, coord, grid))
    plain = run()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cast = run()
    torch.testing.assert_close(cast, plain, atol=0, rtol=0)


@pytest.mark.parametrize("cls", [GeoPEQK, AxialRoPEQK])
def test_learnable_geope_frequencies_get_a_gradient_and_the_same_rotation(cls):
    q, k, _, coord, _ = inputs(d=16)
    fixed, learnt = cls(16), cls(16, learnable=True).double()
    q_out, k_out = learnt(q, k, coord)
    # the parameter starts as float32 frequencies (BlockScale): equal up to their rounding
    torch.testing.assert_close(q_out, fixed(q, k, coord)[0], atol=1e-5, rtol=0)
    (q_out * k_out).sum().backward()
    assert learnt.block_scale.freq.grad is not None and learnt.block_scale.freq.grad.abs().sum() > 0


# ---- where PTv3's encodings coincide with PTv1's (pointgeope/model/rope.py) ---------------------------------

def test_rope3d_is_ptv1s_rotate_pairs():
    q, k, _, coord, _ = inputs(d=16)
    enc = qk_encoding("rope3d", 16).eval()
    from pointgeope.model.rope import axial_frequencies
    freq = axial_frequencies(enc.block_scale(F64, q.device), 16)
    torch.testing.assert_close(enc(q, k, coord)[0], rotate_pairs(q, coord.unsqueeze(1), freq), atol=1e-12, rtol=0)


def test_pointrope_is_ptv1s_pointrope_up_to_a_channel_permutation():
    # PTv1 interleaves pair 3q + a as channels (2(3q + a), 2(3q + a) + 1); LitePT's thirds hold it at
    # (6a... ): channel 2Qa + q and 2Qa + Q + q. The same rotation, channels permuted.
    q, k, _, _, grid = inputs(d=18)
    big_q = 3
    perm = [c for q_ in range(big_q) for a in range(3) for c in (2 * big_q * a + q_, 2 * big_q * a + big_q + q_)]
    thirds, _ = qk_encoding("pointrope", 18).eval()(q, k, None, grid)
    interleaved = rotate_pairs(q[..., perm], grid.unsqueeze(1).to(F64), pointrope_frequencies(18))
    torch.testing.assert_close(thirds[..., perm], interleaved, atol=1e-12, rtol=0)


# ---- Utonia's augmentation of the rope coordinates -----------------------------------------------------------

def test_point3drope_augments_in_training_only_with_utonias_draws():
    q, k, _, coord, _ = inputs()
    enc = Point3DRoPEQK(ROTARY_HEAD_DIM)
    torch.manual_seed(7)
    trained, _ = enc.train()(q, k, coord)
    torch.manual_seed(7)                              # Utonia's order: 3 jitter factors, then 1 rescale factor
    jitter = torch.empty(3, dtype=F64).uniform_(-math.log(1.1), math.log(1.1)).exp()
    rescale = torch.empty(1, dtype=F64).uniform_(-math.log(1.2), math.log(1.2)).exp()
    torch.testing.assert_close(trained, thirds_reference(q, coord * jitter * rescale, 10.0), atol=1e-10, rtol=0)
    assert not torch.allclose(trained, thirds_reference(q, coord, 10.0))
    evaluated, _ = enc.eval()(q, k, coord)
    torch.testing.assert_close(evaluated, thirds_reference(q, coord, 10.0), atol=1e-10, rtol=0)


# ---- bad input ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", QK_ENCODINGS)
def test_wrong_position_shapes_are_named(name):
    q, k, v, coord, grid = inputs(b=2, length=6)
    enc = qk_encoding(name, ROTARY_HEAD_DIM)
    if name == "none":
        assert enc(q, k, None, None) == (q, k)
        return
    bad_coord, bad_grid = (coord[:, :5], grid) if name != "pointrope" else (coord, grid.unsqueeze(1))
    with pytest.raises(ValueError, match=r"of shape \(B, L, 3\) = \(2, 6, 3\)"):
        enc.attention(q, k, v, bad_coord, bad_grid)


@pytest.mark.parametrize("name", QK_ENCODINGS)
def test_wrong_qk_shapes_and_types(name):
    q, k, v, coord, grid = inputs()
    enc = qk_encoding(name, ROTARY_HEAD_DIM)
    with pytest.raises(ValueError, match=r"expected q of shape \(B, H, L, 18\), got \(2, 11, 18\)"):
        enc.attention(q[:, 0], k, v, coord, grid)
    with pytest.raises(ValueError, match="same shape"):
        enc.attention(q, k[:, :2], v, coord, grid)
    with pytest.raises(TypeError, match="floating-point"):
        enc.attention(q.long(), k, v, coord, grid)


@pytest.mark.parametrize("name", ["geope", "lingeope", "rope3d", "point3drope", "pointrope"])
def test_non_finite_and_missing_positions(name):
    q, k, v, coord, grid = inputs()
    enc = qk_encoding(name, ROTARY_HEAD_DIM)
    if name == "pointrope":
        with pytest.raises(TypeError, match="expected grid a tensor"):
            enc.attention(q, k, v, coord, None)
        grid = grid.double()
        grid[0, 3, 1] = float("inf")
    else:
        coord = coord.clone()
        coord[1, 2, 0] = float("nan")
    with pytest.raises(ValueError, match="got 1 non-finite values"):
        enc.attention(q, k, v, coord, grid)
    if name != "pointrope":
        with pytest.raises(TypeError, match="coord a floating-point tensor"):
            enc.attention(q, k, v, grid, grid)


def test_head_width_too_small_and_unknown_names():
    for name, smallest in (("geope", 3), ("lingeope", 3), ("rope3d", 6), ("point3drope", 6), ("pointrope", 6)):
        qk_encoding(name, smallest)
        with pytest.raises(ValueError, match=f"head_dim >= {smallest} for {name}, got {smallest - 1}"):
            qk_encoding(name, smallest - 1)
    with pytest.raises(ValueError, match="expected a positional encoding in"):
        qk_encoding("rpe", 16)
    with pytest.raises(TypeError, match=re.escape("call .attention")):
        qk_encoding("lingeope", 18)(*inputs()[:2], inputs()[3])


@pytest.mark.parametrize("name", ["point3drope", "pointrope"])
@pytest.mark.parametrize("base", [0.0, -100.0, float("nan"), float("inf")])
def test_a_rotary_base_not_finite_and_positive_is_refused(name, base):
    """base^(-q/Q) of a base of 0, < 0 or NaN is inf or NaN: every angle NaN, the queries NaN without a word."""
    with pytest.raises(ValueError, match=f"expected base a finite number > 0, got {base}"):
        qk_encoding(name, ROTARY_HEAD_DIM, base=base)


@pytest.mark.parametrize("name", QK_ENCODINGS)
def test_a_head_width_not_an_int_is_refused_by_name(name):
    """16.0 failed inside ``range`` ("'float' object cannot be interpreted as an integer"), or GeoPE took it."""
    for width in (18.0, True):
        with pytest.raises(TypeError, match=f"expected head_dim an int for {name}, got {width!r}"):
            qk_encoding(name, width)


@pytest.mark.parametrize("name", ["geope", "lingeope"])
def test_coordinates_beyond_the_point_ops_limit_are_refused(name):
    """Finite coordinates of 1e19 overflowed GeoPE's float32 axis norm: NaN attention without a word. Refused
    beyond +-2^60 as the point ops refuse them; the limit itself is taken."""
    q, k, v, coord, grid = inputs(dtype=torch.float32)
    enc = qk_encoding(name, ROTARY_HEAD_DIM).eval()
    with pytest.raises(ValueError, match=r"expected coord within \+-2\^60 .*, got 66 values outside"):
        enc.attention(q, k, v, (1 + coord.abs()) * 1e19, grid)
    assert enc.attention(q, k, v, torch.full_like(coord, 2.0 ** 60), grid).isfinite().all()
    half = coord.half()                              # float16 rounds 2^60 to inf: its inf is still refused
    half[0, 1, 2] = float("inf")
    with pytest.raises(ValueError, match="got 1 non-finite values"):
        enc.attention(q, k, v, half, grid)


def test_width_variant():
    assert rotary_channels((2, 4, 8, 16, 32)) == (36, 72, 144, 288, 576)
    assert rotary_channels((3, 6), head_dim=16) == (48, 96)


@pytest.mark.parametrize("name", QK_ENCODINGS)
def test_fixed_encodings_add_nothing_to_the_state_dict(name):
    # a network holding them still loads Pointcept's PT-v3m1 state_dict with strict=True
    assert qk_encoding(name, ROTARY_HEAD_DIM).state_dict() == {}
    moved = qk_encoding(name, ROTARY_HEAD_DIM).double()
    q, k, v, coord, grid = inputs()
    assert moved.attention(q, k, v, coord, grid).dtype == F64


@pytest.mark.parametrize("name", ROTARY)
def test_fixed_frequencies_are_made_once_per_device_and_dtype(name, monkeypatch):
    """The frequencies come from the host once per device and dtype and are kept (on a GPU a copy at every call
    would wait for its queue): a second call makes none and turns the same; float32 then gets its own, which
    turn as a fresh encoding's do."""
    from pointgeope import geope
    from pointgeope.model import rope
    made = []
    monkeypatch.setattr(rope, "_POINTROPE_TABLES", geope.FixedTables())     # shared by every module: start empty
    monkeypatch.setattr(geope, "_BLOCK_SCALES", geope.FixedTables())

    def counted(fn, attr):  # each wrapper holds its own function and name, not the loop's last
        return lambda *a, **kw: made.append(attr) or fn(*a, **kw)

    for module, attr in ((geope, "frequencies"), (rope, "pointrope_frequencies")):
        monkeypatch.setattr(module, attr, counted(getattr(module, attr), attr))
    q, k, _, coord, grid = inputs()
    enc = qk_encoding(name, ROTARY_HEAD_DIM).eval()
    first = enc(q, k, coord, grid)
    once = len(made)
    second = enc(q, k, coord, grid)
    assert once >= 1 and len(made) == once
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    single = enc(q.float(), k.float(), coord.float(), grid)
    enc(q.float(), k.float(), coord.float(), grid)
    assert len(made) == 2 * once
    fresh = qk_encoding(name, ROTARY_HEAD_DIM).eval()(q.float(), k.float(), coord.float(), grid)
    assert all(torch.equal(a, b) for a, b in zip(single, fresh, strict=True))
