"""Tests of pointgeope/geope.py against the spec's independent reference vectors and its properties."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from pointgeope.geope import BlockScale, GeoPE, frequencies, phase_vector, rotate, rotation_matrix
from tests.conftest import cuda_devices

TOL = {torch.float32: 1e-5, torch.float64: 1e-10}


@pytest.fixture(scope="module")
def vectors(geope_vectors_path):
    return json.loads(geope_vectors_path.read_text())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_reference_matrices(vectors, dtype):
    for case in vectors["matrix"]:
        t = torch.tensor(case["phases"], dtype=dtype)
        assert t.shape == (case["axes"],)
        expected = torch.tensor(case["matrix"], dtype=dtype)
        torch.testing.assert_close(rotation_matrix(t), expected, atol=TOL[dtype], rtol=0)
        # Rodrigues form on the basis vectors gives the same columns.
        torch.testing.assert_close(rotate(torch.eye(3, dtype=dtype), t.expand(3, -1)).T, expected,
                                   atol=TOL[dtype], rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_reference_linear_relative(vectors, dtype):
    for case in vectors["linear"]:
        tq = torch.tensor(case["phases_query"], dtype=dtype)
        tk = torch.tensor(case["phases_key"], dtype=dtype)
        expected = torch.tensor(case["relative_matrix"], dtype=dtype)
        torch.testing.assert_close(rotation_matrix(tk - tq), expected, atol=TOL[dtype], rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_reference_apply(vectors, dtype):
    assert {case["channels"] for case in vectors["apply"]} == {3, 8, 32, 33}
    for case in vectors["apply"]:
        pe = GeoPE(case["channels"], axes=case["axes"], base=case["base"], pos_scale=case["pos_scale"])
        x = torch.tensor(case["x"], dtype=dtype)
        pos = torch.tensor(case["pos"], dtype=dtype)
        torch.testing.assert_close(pe(x, pos), torch.tensor(case["out"], dtype=dtype), atol=TOL[dtype], rtol=0)


def test_reference_frequencies(vectors):
    for case in vectors["frequencies"]:
        w = frequencies(case["channels"], case["base"])
        torch.testing.assert_close(w, torch.tensor(case["w"], dtype=torch.float64), atol=1e-12, rtol=0)


def test_frequencies_decay_from_one():
    w = frequencies(96)
    assert w.shape == (32,)
    assert w[0] == 1.0 and bool((w[1:] < w[:-1]).all())
    assert math.isclose(w[-1].item(), 100 ** (-2 * 31 / 96))
    with pytest.raises(ValueError, match="at least 3 channels"):
        frequencies(2)


@pytest.mark.parametrize("axes", [1, 2, 3])
def test_rotation_is_orthonormal_with_det_one(axes):
    t = torch.randn(200, axes, dtype=torch.float64) * 5
    r = rotation_matrix(t)
    eye = torch.eye(3, dtype=torch.float64).expand(200, 3, 3)
    torch.testing.assert_close(r @ r.transpose(-1, -2), eye, atol=1e-12, rtol=0)
    torch.testing.assert_close(torch.linalg.det(r), torch.ones(200, dtype=torch.float64), atol=1e-12, rtol=0)
    v = torch.randn(200, 3, dtype=torch.float64)
    torch.testing.assert_close(rotate(v, t).norm(dim=-1), v.norm(dim=-1), atol=1e-12, rtol=0)


@pytest.mark.parametrize("axes", [1, 2, 3])
def test_zero_phase_is_identity_and_negation_is_transpose(axes):
    assert torch.equal(rotation_matrix(torch.zeros(axes, dtype=torch.float64)), torch.eye(3, dtype=torch.float64))
    t = torch.randn(50, axes, dtype=torch.float64) * 3
    torch.testing.assert_close(rotation_matrix(-t), rotation_matrix(t).transpose(-1, -2), atol=1e-12, rtol=0)


def test_angle_and_axis():
    """R(t) rotates by |t| / A about tau(t) / |t|: the axis is fixed, and the trace gives the angle."""
    for axes in (1, 2, 3):
        t = torch.randn(20, axes, dtype=torch.float64)
        r = rotation_matrix(t)
        tau = phase_vector(t)
        torch.testing.assert_close((r @ tau.unsqueeze(-1)).squeeze(-1), tau, atol=1e-12, rtol=0)
        cos_angle = (r.diagonal(dim1=-2, dim2=-1).sum(-1) - 1) / 2
        torch.testing.assert_close(cos_angle, torch.cos(t.norm(dim=-1) / axes), atol=1e-12, rtol=0)


def test_axis_symmetry():
    """Permuting the phases permutes the rotation axis: R(P t) = P R(t) P^T."""
    t = torch.randn(30, 3, dtype=torch.float64) * 2
    for perm in ([1, 2, 0], [2, 0, 1], [0, 2, 1], [1, 0, 2]):
        p = torch.eye(3, dtype=torch.float64)[perm]
        det = torch.linalg.det(p)
        # A proper permutation maps the axis exactly; an odd one also reverses the rotation sense.
        expected = p @ rotation_matrix(t) @ p.T
        got = rotation_matrix(t[:, perm]) if det > 0 else rotation_matrix(t[:, perm]).transpose(-1, -2)
        torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)


def test_one_axis_is_rope_with_negative_angle():
    """A = 1 rotates (v_x, v_z) like RoPE by -t: (x, z) -> (x cos t + z sin t, -x sin t + z cos t)."""
    t = torch.randn(100, 1, dtype=torch.float64) * 10
    v = torch.randn(100, 3, dtype=torch.float64)
    out = rotate(v, t)
    c, s = torch.cos(-t[:, 0]), torch.sin(-t[:, 0])
    rope_x = v[:, 0] * c - v[:, 2] * s
    rope_z = v[:, 0] * s + v[:, 2] * c
    torch.testing.assert_close(out[:, 0], rope_x, atol=1e-12, rtol=0)
    torch.testing.assert_close(out[:, 2], rope_z, atol=1e-12, rtol=0)
    torch.testing.assert_close(out[:, 1], v[:, 1], atol=1e-12, rtol=0)


def test_two_axes_closed_form_of_the_paper():
    """Section 3.2: with Theta = |t| / 2 and (alpha, beta) = (t_h, t_w) / |t| the matrix is

    [[cos T, -b sin T, a sin T],
     [b sin T, a^2 + b^2 cos T, ab (1 - cos T)],
     [-a sin T, ab (1 - cos T), b^2 + a^2 cos T]]
    """
    t = torch.randn(100, 2, dtype=torch.float64) * 4
    theta = t.norm(dim=-1) / 2
    a, b = (t / t.norm(dim=-1, keepdim=True)).unbind(-1)
    c, s = theta.cos(), theta.sin()
    expected = torch.stack([
        torch.stack([c, -b * s, a * s], -1),
        torch.stack([b * s, a * a + b * b * c, a * b * (1 - c)], -1),
        torch.stack([-a * s, a * b * (1 - c), b * b + a * a * c], -1),
    ], -2)
    torch.testing.assert_close(rotation_matrix(t), expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("axes", [1, 2, 3])
def test_rotate_equals_matrix_product(axes):
    t = torch.randn(64, axes, dtype=torch.float64) * 7
    v = torch.randn(64, 3, dtype=torch.float64)
    torch.testing.assert_close(rotate(v, t), (rotation_matrix(t) @ v.unsqueeze(-1)).squeeze(-1), atol=1e-12, rtol=0)


def _blockwise_reference(pe: GeoPE, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """Dense reference: build each block's 3x3 matrix from its phases t_{a,b} = pos_scale p_a w_b."""
    w = frequencies(pe.channels, pe.base).to(x.dtype)
    phases = pe.pos_scale * pos.unsqueeze(-2) * w.unsqueeze(-1)  # (..., n, A)
    blocks = x[..., : 3 * pe.blocks].unflatten(-1, (pe.blocks, 3))
    rotated = (rotation_matrix(phases) @ blocks.unsqueeze(-1)).squeeze(-1).flatten(-2)
    return torch.cat([rotated, x[..., 3 * pe.blocks:]], dim=-1)


@pytest.mark.parametrize("channels", [3, 16, 32, 35])
@pytest.mark.parametrize("axes", [1, 2, 3])
def test_module_matches_dense_blocks(channels, axes):
    pe = GeoPE(channels, axes=axes, pos_scale=25.0)
    x = torch.randn(40, channels, dtype=torch.float64)
    pos = torch.randn(40, axes, dtype=torch.float64) * 2
    torch.testing.assert_close(pe(x, pos), _blockwise_reference(pe, x, pos), atol=1e-10, rtol=0)
    torch.testing.assert_close(pe(pe(x, pos), pos, inverse=True), x, atol=1e-10, rtol=0)


def test_relative_standard_and_linear():
    pe = GeoPE(32, axes=3, pos_scale=25.0)
    n, k = 50, 8
    x_j = torch.randn(n, k, 32, dtype=torch.float64)
    pos_i = torch.rand(n, 1, 3, dtype=torch.float64) * 3
    pos_j = pos_i + torch.randn(n, k, 3, dtype=torch.float64) * 0.1
    # Standard: R(t_i)^T R(t_j) x_j, checked against dense matrices.
    w = frequencies(32).double()
    def dense(phases):  # (..., A) positions -> (..., n, 3, 3)
        return rotation_matrix(25.0 * phases.unsqueeze(-2) * w.unsqueeze(-1))
    blocks = x_j[..., :30].unflatten(-1, (10, 3)).unsqueeze(-1)
    expected = (dense(pos_i).transpose(-1, -2) @ dense(pos_j) @ blocks).squeeze(-1).flatten(-2)
    got = pe.relative(x_j, pos_i, pos_j)
    torch.testing.assert_close(got[..., :30], expected, atol=1e-9, rtol=0)
    torch.testing.assert_close(got[..., 30:], x_j[..., 30:], atol=0, rtol=0)
    # Linear: R(t_j - t_i) x_j.
    expected_lin = (dense(pos_j - pos_i) @ blocks).squeeze(-1).flatten(-2)
    torch.testing.assert_close(pe.relative(x_j, pos_i, pos_j, linear=True)[..., :30], expected_lin, atol=1e-9, rtol=0)
    # Standard and linear differ in general (rotations about different axes do not commute).
    assert (got - pe.relative(x_j, pos_i, pos_j, linear=True)).abs().max() > 1e-3


def test_linear_depends_only_on_displacement_standard_does_not():
    pe = GeoPE(24, axes=3, pos_scale=25.0)
    x_j = torch.randn(30, 4, 24, dtype=torch.float64)
    pos_i = torch.rand(30, 1, 3, dtype=torch.float64)
    pos_j = pos_i + torch.randn(30, 4, 3, dtype=torch.float64) * 0.2
    shift = torch.tensor([1.7, -0.3, 2.2], dtype=torch.float64)
    lin = pe.relative(x_j, pos_i, pos_j, linear=True)
    torch.testing.assert_close(pe.relative(x_j, pos_i + shift, pos_j + shift, linear=True), lin, atol=1e-10, rtol=0)
    std = pe.relative(x_j, pos_i, pos_j)
    assert (pe.relative(x_j, pos_i + shift, pos_j + shift) - std).abs().max() > 1e-2


@pytest.mark.parametrize("axes", [1, 2, 3])
def test_gradients_finite_and_correct_at_zero(axes):
    t = torch.zeros(4, axes, dtype=torch.float64, requires_grad=True)
    v = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(rotate, (v, t))
    assert torch.autograd.gradcheck(rotation_matrix, (t,))
    # Also just around the Taylor switch and far from it.
    for scale in (1e-9, 5e-3, 1e-2, 1.0):
        t2 = (torch.randn(4, axes, dtype=torch.float64) * scale).requires_grad_()
        assert torch.autograd.gradcheck(rotate, (v, t2))
    pe = GeoPE(9, axes=axes, learnable=True).double()
    pos = torch.zeros(3, axes, dtype=torch.float64, requires_grad=True)
    x = torch.randn(3, 9, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, p: pe(x, p), (x, pos))
    pe(x, pos).sum().backward()
    assert torch.isfinite(pe.block_scale.freq.grad).all() and torch.isfinite(pos.grad).all()


def test_series_matches_closed_form_below_the_switch():
    """Below phi^2 = 1e-4 the Taylor series stand in for cos, sin/phi, (1-cos)/phi^2: same matrix."""
    phi = torch.tensor([0.0099999, 0.005, 1e-3], dtype=torch.float64)
    t = torch.stack([phi * 2, torch.zeros_like(phi)], -1)  # A = 2: rotation by phi about the y axis
    c, s = phi.cos(), phi.sin()
    zero, one = torch.zeros_like(phi), torch.ones_like(phi)
    expected = torch.stack([torch.stack([c, zero, s], -1), torch.stack([zero, one, zero], -1),
                            torch.stack([-s, zero, c], -1)], -2)
    torch.testing.assert_close(rotation_matrix(t), expected, atol=1e-14, rtol=0)


def quaternion_geope(x: np.ndarray, pos: np.ndarray, base: float = 100.0, pos_scale: float = 25.0) -> np.ndarray:
    """GeoPE from the spec's quaternion definition, in float64, with no code of pointgeope: block ``b`` of
    ``x (..., C)`` is the pure quaternion ``v``, turned into ``r v r*`` by ``r = exp(u)``,
    ``u = (1/A) sum_a (t_a / 2) e_a`` on the units (A = 3: i, j, k; A = 2: j, k; A = 1: j),
    ``t_a = pos_scale * pos_a * base ** (-2 b / (3 n))``; the last ``C mod 3`` channels pass through."""
    out = np.array(x, dtype=np.float64)
    n, axes = out.shape[-1] // 3, pos.shape[-1]
    units = {3: [1, 2, 3], 2: [2, 3], 1: [2]}[axes]                       # quaternion slots (w, i, j, k)
    for b in range(n):
        t = pos_scale * pos * base ** (-2 * b / (3 * n))
        u = np.zeros(pos.shape[:-1] + (4,))
        u[..., units] = t / (2 * axes)
        half = np.linalg.norm(u, axis=-1, keepdims=True)
        r = np.sin(half) * np.divide(u, half, out=np.zeros_like(u), where=half > 0)
        r[..., :1] = np.cos(half)
        v = np.zeros(out.shape[:-1] + (4,))
        v[..., 1:] = out[..., 3 * b:3 * b + 3]
        conj = r * np.array([1, -1, -1, -1])
        out[..., 3 * b:3 * b + 3] = hamilton(hamilton(np.broadcast_to(r, v.shape), v), conj)[..., 1:]
    return out


def hamilton(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The quaternion product ``p q`` of ``(..., 4)`` arrays ``(w, i, j, k)``."""
    pw, px, py, pz = np.moveaxis(p, -1, 0)
    qw, qx, qy, qz = np.moveaxis(q, -1, 0)
    return np.stack([pw * qw - px * qx - py * qy - pz * qz, pw * qx + px * qw + py * qz - pz * qy,
                     pw * qy - px * qz + py * qw + pz * qx, pw * qz + px * qy - py * qx + pz * qw], -1)


def test_the_quaternion_reference_gives_the_spec_vectors(vectors):
    """The test's own quaternion sandwich reproduces the spec's ``apply`` vectors (every A and width)."""
    for case in vectors["apply"]:
        got = quaternion_geope(np.array(case["x"]), np.array(case["pos"]), case["base"], case["pos_scale"])
        np.testing.assert_allclose(got, case["out"], atol=1e-12, rtol=0)


@pytest.mark.parametrize("device", cuda_devices())
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_dtypes_and_devices(device, dtype):
    """float32/64 against the float64 rotation of the same positions. bfloat16 positions carry ~3 significant
    digits (phases of ~100 rad move by ~0.4 rad), so bfloat16 is compared with the float64 quaternion
    reference of the *rounded* inputs the function receives: the rotation runs in float32, and the one
    error left is the output's rounding to bfloat16 (relative 2^-9)."""
    pe = GeoPE(32, axes=3).to(device)
    x = torch.randn(10, 5, 32, dtype=torch.float64)
    pos = torch.rand(10, 5, 3, dtype=torch.float64) * 4
    ref = pe.cpu()(x, pos)
    pe = pe.to(device)
    out = pe(x.to(device, dtype), pos.to(device, dtype))
    assert out.dtype == dtype and out.device.type == device
    if dtype == torch.bfloat16:
        rounded = quaternion_geope(x.to(dtype).double().numpy(), pos.to(dtype).double().numpy())
        torch.testing.assert_close(out.double().cpu(), torch.from_numpy(rounded), atol=1e-4, rtol=2 ** -8)
    else:
        tol = {torch.float32: 1e-4, torch.float64: 1e-12}[dtype]
        torch.testing.assert_close(out.double().cpu(), ref, atol=tol, rtol=0)


def test_bad_input_messages():
    pe = GeoPE(12, axes=3)
    with pytest.raises(ValueError, match=r"expected x of shape \(\.\.\., 12\), got \(4, 10\)"):
        pe(torch.randn(4, 10), torch.randn(4, 3))
    with pytest.raises(ValueError, match=r"expected pos of shape \(\.\.\., 3\), got \(4, 2\)"):
        pe(torch.randn(4, 12), torch.randn(4, 2))
    with pytest.raises(ValueError, match="A in"):
        rotation_matrix(torch.randn(4, 4))
    with pytest.raises(ValueError, match="axes in"):
        GeoPE(12, axes=4)
    assert "channels=12, axes=3" in repr(pe)


def test_fast_path_gradient_for_features_only():
    """With fixed positions and frequencies the rotation runs through a memory-light autograd function
    whose backward is the inverse rotation; it must agree with differentiating the formula."""
    pe = GeoPE(35, axes=3)
    pos = torch.rand(6, 4, 3, dtype=torch.float64) * 3
    for x_shape, pos_ in (((6, 4, 35), pos), ((6, 1, 35), pos), ((6, 4, 35), pos[:, :1])):
        x = torch.randn(x_shape, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(lambda x: pe(x, pos_), (x,))  # noqa: B023 - run at once
        g = torch.randn(torch.broadcast_shapes(x_shape[:-1], pos_.shape[:-1]) + (35,), dtype=torch.float64)
        (fast,) = torch.autograd.grad(pe(x, pos_), x, g)
        pos_req = pos_.clone().requires_grad_()  # forces the plain-autograd formula
        (slow,) = torch.autograd.grad(pe(x, pos_req), x, g)
        torch.testing.assert_close(fast, slow, atol=1e-12, rtol=0)


def test_block_scale_is_pos_scale_times_frequency_over_axes():
    """``k_b = pos_scale * w_b / A``, and block ``b`` of GeoPE turns by the angle ``k_b |p|`` about ``p``."""
    for axes, learnable in ((3, False), (2, True)):
        scale = BlockScale(12, base=50.0, pos_scale=10.0, axes=axes, learnable=learnable)
        expected = torch.tensor([50.0 ** (-2 * b / 12) * 10.0 / axes for b in range(4)], dtype=torch.float64)
        torch.testing.assert_close(scale(torch.float64, torch.device("cpu")), expected,
                                   atol=1e-6 if learnable else 1e-15, rtol=0)
        assert (scale.freq is not None) == learnable == scale.learnable
    pe = GeoPE(6, axes=3, pos_scale=10.0)
    pos = torch.tensor([[0.0, 0.0, 0.3]], dtype=torch.float64)             # about z
    x = torch.tensor([[1.0, 0.0, 0.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
    k = pe.block_scale(torch.float64, torch.device("cpu"))
    angles = torch.atan2(pe(x, pos)[0, [1, 4]], pe(x, pos)[0, [0, 3]])
    torch.testing.assert_close(angles, k * 0.3, atol=1e-12, rtol=0)


@pytest.mark.parametrize("bad", [0.0, -100.0, float("nan"), float("inf")])
def test_a_base_or_pos_scale_not_finite_and_positive_is_one_error_naming_it(bad):
    """``(-100) ** (-2b / 3n)`` is NaN and a NaN ``pos_scale`` gives NaN phases: each constructor refuses them by
    name (``check_scale``, shared with ``pointgeope.nn``), before any rotation turns a block into NaN."""
    with pytest.raises(ValueError, match=rf"expected base a finite number > 0, got {bad}"):
        frequencies(6, bad)
    for make in (lambda **kw: BlockScale(6, **kw), lambda **kw: GeoPE(6, **kw),
                 lambda **kw: BlockScale(6, learnable=True, **kw)):
        with pytest.raises(ValueError, match=rf"expected base a finite number > 0, got {bad}"):
            make(base=bad)
        with pytest.raises(ValueError, match=rf"expected pos_scale a finite number > 0, got {bad}"):
            make(pos_scale=bad)
    with pytest.raises(TypeError, match="expected base a finite number > 0, got '100'"):
        GeoPE(6, base="100")
    assert GeoPE(6, base=torch.tensor(10.0), pos_scale=2).base == 10.0       # a 0-dim tensor or an int is a number
