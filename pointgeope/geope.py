"""GeoPE: geometric positional embedding by quaternion rotation of 3-vectors.

Paper: "GeoPE: A Unified Geometric Positional Embedding for Structured Tensors" (Yao and Yang),
https://arxiv.org/abs/2512.04963. The conventions the paper leaves open are fixed in ``docs/GEOPE_SPEC.md``
(in this repository); every formula below follows it.

**One rotation.** A position with ``A`` axes has phases ``t = (t_1, ..., t_A)`` placed on quaternion
units (A = 3: ``(i, j, k)``, A = 2: ``(j, k)``, A = 1: ``j``), i.e. on the 3-vector

    tau(t) = (t_1, t_2, t_3)  |  (0, t_1, t_2)  |  (0, t_1, 0)          for A = 3 | 2 | 1.

The Lie-algebra mean ``u = (1/A) sum_a (t_a / 2) e_a`` gives ``r = exp(u)``, whose sandwich ``r p r*``
rotates a 3-vector by the rotation vector ``w = tau(t) / A`` (angle ``phi = |w| = |t| / A``, axis
``w / |w|``). With Rodrigues' formula, written so that nothing divides by ``phi``:

    R(t) v = cos(phi) v + s(phi) (w x v) + c(phi) w (w . v)
    s(phi) = sin(phi) / phi,   c(phi) = (1 - cos(phi)) / phi^2

``cos``, ``s`` and ``c`` are even in ``phi``, hence smooth functions of ``phi^2 = w . w``; near 0 they
are evaluated by their Taylor series, so values and gradients stay finite at ``t = 0``.

**Channels.** A feature of ``C`` channels holds ``n = C // 3`` blocks; block ``b`` is channels
``[3b, 3b+1, 3b+2]`` and the last ``C mod 3`` channels pass through::

    # channels: [ v0x v0y v0z | v1x v1y v1z | ... | v(n-1)z | pass-through ]
    w_b = base ** (-2 b / (3 n))          t_{a,b} = pos_scale * p_a * w_b

**Block scale.** The phases of every block are the same vector ``tau(p)`` scaled, so block ``b`` rotates
by the rotation vector ``k_b tau(p)``, ``k_b`` the *block scale*:

    k_b = pos_scale * w_b / A          (angle phi_b = k_b |tau(p)|; A = 3 for point clouds)

the one convention of the code: every kernel (here, ``pointgeope/model/rotation.py``, ``linear_rotation.py``,
``geope_pairs.py``) takes ``block_scale`` ``(n,)`` holding ``k_b`` (``BlockScale``) and turns block ``b`` by the
angle ``k_b |p|`` (or ``k_b |p_j - p_i|``); the cross and dot products with ``tau(p)`` are shared by the blocks.

**Relative use.** Standard GeoPE applies ``R(t(p))``; in attention the key is taken into the query's
frame, ``R(t(p_i))^T R(t(p_j)) x_j``. Linear GeoPE uses ``R(t(p_j) - t(p_i)) x_j``, which only depends on
the displacement, because the phases are linear in ``p``. No per-pair 3x3 matrix is ever built.
"""
from __future__ import annotations

import torch
from torch import Tensor, nn

from pointgeope.fixed_tables import FixedTables
from pointgeope.geope_checks import check_coordinates, check_phase_scales, check_real, check_scale, coordinates_outside

# check_real, check_scale (pointgeope.geope_checks) and FixedTables (pointgeope.fixed_tables) are importable
# from here as well, where they were first defined.
__all__ = ["phase_vector", "rotation_matrix", "rotate", "rodrigues", "unit_axis", "rotation_terms", "geometry_dtype",
           "apply_geope", "relative_geope", "frequencies", "check_real", "check_scale", "FixedTables", "BlockScale",
           "GeoPE"]

# Below this phi^2 the Taylor series are used; the first dropped term is below 1e-15 there.
_SMALL_PHI_SQ = 1e-4


def geometry_dtype(dtype: torch.dtype) -> torch.dtype:
    """Rotations are built in float32 at least (float64 stays): phases reach hundreds of radians (metres /
    grid size), and half-precision inputs are rotated in float32 and cast back. The one owner of that rule
    (``pointgeope.model.rotation`` re-exports it for the model's encodings)."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def phase_vector(phases: Tensor) -> Tensor:
    """Place phases ``(..., A)`` on the quaternion units: returns ``tau(t)`` of shape ``(..., 3)``."""
    axes = phases.shape[-1]
    if axes == 3:
        return phases
    zero = torch.zeros_like(phases[..., :1])
    if axes == 2:
        return torch.cat([zero, phases], dim=-1)
    if axes == 1:
        return torch.cat([zero, phases, zero], dim=-1)
    raise ValueError(f"expected phases of shape (..., A) with A in (1, 2, 3), got {tuple(phases.shape)}")


def _coefficients(phi_sq: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``cos(phi)``, ``sin(phi)/phi`` and ``(1-cos(phi))/phi^2`` as smooth functions of ``phi^2``."""
    small = phi_sq < _SMALL_PHI_SQ
    safe_sq = torch.where(small, torch.ones_like(phi_sq), phi_sq)  # keeps the unused branch's grad finite
    phi = safe_sq.sqrt()
    cos = torch.where(small, 1 - phi_sq / 2 + phi_sq * phi_sq / 24, phi.cos())
    sinc = torch.where(small, 1 - phi_sq / 6 + phi_sq * phi_sq / 120, phi.sin() / phi)
    versc = torch.where(small, 0.5 - phi_sq / 24 + phi_sq * phi_sq / 720, (1 - phi.cos()) / safe_sq)
    return cos, sinc, versc


def rotation_matrix(phases: Tensor) -> Tensor:
    """The 3x3 rotation ``R(t)`` of phases ``(..., A)``, A in {1, 2, 3}; returns ``(..., 3, 3)``.

    ``R = cos(phi) I + s(phi) [w]_x + c(phi) w w^T`` with ``w = tau(t) / A``.
    """
    w = phase_vector(phases) / phases.shape[-1]
    cos, sinc, versc = _coefficients((w * w).sum(-1))
    wx, wy, wz = w.unbind(-1)
    zero = torch.zeros_like(wx)
    cross = torch.stack([zero, -wz, wy, wz, zero, -wx, -wy, wx, zero], dim=-1).unflatten(-1, (3, 3))
    eye = torch.eye(3, dtype=w.dtype, device=w.device)
    outer = w.unsqueeze(-1) * w.unsqueeze(-2)
    return cos[..., None, None] * eye + sinc[..., None, None] * cross + versc[..., None, None] * outer


def rotate(v: Tensor, phases: Tensor) -> Tensor:
    """Rotate 3-vectors ``v (..., 3)`` by ``R(t)`` of phases ``(..., A)`` (broadcast), without matrices."""
    if v.shape[-1] != 3:
        raise ValueError(f"expected vectors of shape (..., 3), got {tuple(v.shape)}")
    check_real("phases", phases, integer=True)
    w = phase_vector(phases) / phases.shape[-1]
    return rodrigues(v, w, torch.ones((), dtype=w.dtype, device=w.device))


def rodrigues(v: Tensor, axis: Tensor, block_scale: Tensor) -> Tensor:
    """``R v_b`` of every block ``b`` for the rotation vector ``k_b * axis`` (angle ``k_b |axis|``).

    Args:
        v: ``(..., n, 3)`` vectors (or ``(..., 3)`` with ``block_scale`` a scalar).
        axis: ``(..., 3)`` rotation vector shared by the blocks (``tau(p)``).
        block_scale: ``(n,)`` block scales ``k_b`` (or a scalar).

    When only ``v`` needs a gradient (positions are data, frequencies fixed), a custom autograd function
    keeps nothing of size ``v`` for the backward pass, whose gradient is the inverse rotation
    ``R^T g = R(-w) g``. Otherwise plain autograd differentiates the formula.
    """
    check_real("v", v)
    out_dtype = v.dtype
    dtype = geometry_dtype(torch.promote_types(v.dtype, axis.dtype))
    v, axis, block_scale = v.to(dtype), axis.to(dtype), block_scale.to(dtype)
    if block_scale.dim() == 1:  # blocks: axis (..., 3) -> (..., 1, 3), block_scale (n,) -> (n, 1)
        axis = axis.unsqueeze(-2)
        block_scale = block_scale.unsqueeze(-1)
    if torch.is_grad_enabled() and (axis.requires_grad or block_scale.requires_grad):
        out = _rodrigues_formula(v, axis, block_scale)
    else:
        out = _RotateVectors.apply(v, axis, block_scale)
    return out.to(out_dtype)


def _rodrigues_formula(v: Tensor, axis: Tensor, block_scale: Tensor) -> Tensor:
    """``cos v + s k (a x v) + c k^2 (a . v) a`` (``k = block_scale``, ``a = axis``), differentiable in all
    inputs."""
    cos, sinc, versc = _coefficients((axis * axis).sum(-1, keepdim=True) * block_scale * block_scale)
    cross = torch.linalg.cross(*torch.broadcast_tensors(axis, v), dim=-1)   # cross broadcasts no missing dim
    dot = (axis * v).sum(-1, keepdim=True)
    return cos * v + (sinc * block_scale) * cross + (versc * block_scale * block_scale * dot) * axis


def unit_axis(axis: Tensor) -> tuple[Tensor, Tensor]:
    """``(u, |a|)``: the rotation axis ``u = a / |a|`` of ``axis (..., 3)`` and its norm ``(..., 1)``; at
    ``a = 0``, ``u = 0`` exactly, so that Rodrigues' ``R v = cos(phi) v + sin(phi) (u x v) + (1 - cos(phi))
    (u . v) u`` is the identity there with no series (through :func:`rotation_terms`, the rule of every
    per-component Rodrigues kernel)."""
    radius = axis.norm(dim=-1, keepdim=True)
    return axis / radius.clamp_min(torch.finfo(axis.dtype).tiny), radius


def rotation_terms(axis: Tensor, block_scale: Tensor,
                   dtype: torch.dtype | None = None) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Rodrigues' terms ``(u, cos(phi), sin(phi), 1 - cos(phi))`` of the rotations by the vectors ``k_b a``.

    ``u = a / |a|`` is the axis of ``axis (..., 3)`` (:func:`unit_axis`, 0 at ``a = 0``) and
    ``phi = |a| * block_scale`` the angles, the broadcast of ``|a| (..., 1)`` with ``block_scale``
    (``(n,)``: ``(..., n)``), so that every per-component kernel writes

        R v = cos(phi) v + sin(phi) (u x v) + (1 - cos(phi)) (u . v) u

    (``R = I`` exactly at ``a = 0``, no series). Angles are computed in ``axis``'s dtype (keep it float32 or
    wider: phases reach hundreds of radians); with ``dtype``, ``u``, ``cos`` and ``sin`` are cast to it and
    the versine computed there.

    The one owner of the rule for the torch paths (``_rodrigues_no_grad``, ``linear_rotation._turn_planes``,
    ``geope_pairs.rodrigues_rows``, ``rotation.block_rotations``, ``rotation_tables`` and
    ``nn.target_frame.target_coefficients``); ``triton_attention._rodrigues_terms`` is its in-kernel copy,
    held equal by ``tests/model/test_rodrigues_terms.py``. Where the axis needs a gradient,
    ``_coefficients``' series in ``phi^2`` is the form (``_rodrigues_formula``, ``qk_lingeope``).
    """
    u, radius = unit_axis(axis)
    phi = radius * block_scale
    cos, sin = phi.cos(), phi.sin()
    if dtype is not None:
        u, cos, sin = u.to(dtype), cos.to(dtype), sin.to(dtype)
    return u, cos, sin, 1 - cos


@torch.no_grad()
def _rodrigues_no_grad(v: Tensor, axis: Tensor, block_scale: Tensor, out: Tensor | None = None) -> Tensor:
    """The same rotation written per component for speed (no autograd): with ``u = a / |a|`` and
    ``phi = |a| k``, ``R v = cos(phi) v + sin(phi) (u x v) + (1 - cos(phi)) (u . v) u``. At ``a = 0``,
    ``u = 0`` and ``R = I`` exactly, so no series is needed when the axis needs no gradient.

    Shapes: ``v (..., n, 3)``, ``axis (..., 1, 3)``, ``block_scale (n, 1)`` (or ``v, axis (..., 3)`` and a
    scalar ``block_scale``); only ``(..., n)`` temporaries exist besides the output, which may be given as
    ``out`` (e.g. a strided view of a larger buffer). Angles are computed in ``axis``'s dtype (keep it
    float32 or wider: phases reach hundreds of radians), products in ``v``'s.
    """
    u, cos, sin, versine = rotation_terms(axis, block_scale, v.dtype)
    cos, sin, versine = cos.squeeze(-1), sin.squeeze(-1), versine.squeeze(-1)   # (..., n)
    ux, uy, uz = u.unbind(-1)                                             # (..., 1) each
    vx, vy, vz = v.unbind(-1)                                             # (..., n) strided views
    along = vx * ux
    along.addcmul_(vy, uy).addcmul_(vz, uz).mul_(versine)                 # (1 - cos) (u . v)
    if torch.compiler.is_compiling() and out is None:                    # no out= on strided views: a graph
        return torch.stack([(v1 * u1 - v2 * u2) * sin + cos * vc + along * uc    # break each; inductor fuses
                            for vc, uc, u1, v1, u2, v2 in ((vx, ux, uy, vz, uz, vy), (vy, uy, uz, vx, ux, vz),
                                                           (vz, uz, ux, vy, uy, vx))], dim=-1)
    if out is None:
        out = v.new_empty(torch.broadcast_shapes(v.shape, axis.shape))
    ox, oy, oz = out.unbind(-1)
    for o, vc, uc, u1, v1, u2, v2 in ((ox, vx, ux, uy, vz, uz, vy), (oy, vy, uy, uz, vx, ux, vz),
                                      (oz, vz, uz, ux, vy, uy, vx)):
        torch.mul(v1, u1, out=o)                                          # (u x v)_c = u1 v1 - u2 v2
        o.sub_(v2 * u2).mul_(sin)
        o.addcmul_(cos, vc).addcmul_(along, uc)
    return out


class _RotateVectors(torch.autograd.Function):
    """Rotation of ``v`` with a gradient for ``v`` only; saves the (small) axis and block_scale. Differentiated
    (``create_graph``), the gradient ``R^T g = R(-a) g`` is this Function again: every order in ``v`` is exact."""

    @staticmethod
    def forward(ctx, v: Tensor, axis: Tensor, block_scale: Tensor) -> Tensor:
        ctx.save_for_backward(axis, block_scale)
        ctx.v_shape = v.shape
        return _rodrigues_no_grad(v, axis, block_scale)

    @staticmethod
    def backward(ctx, grad: Tensor):
        axis, block_scale = ctx.saved_tensors
        turn = _RotateVectors.apply if torch.is_grad_enabled() else _rodrigues_no_grad   # create_graph: tracked
        grad_v = turn(grad, -axis, block_scale).sum_to_size(ctx.v_shape) if ctx.needs_input_grad[0] else None
        return grad_v, None, None


def apply_geope(x: Tensor, pos: Tensor, block_scale: Tensor, inverse: bool = False) -> Tensor:
    """``R(t(pos)) x`` for every block of ``x (..., C)`` (``R(t(pos))^T x`` with ``inverse``); the last
    ``C mod 3`` channels pass through. ``pos (..., A)`` broadcasts against ``x``'s leading dims, ``block_scale
    (n,)`` holds ``k_b = pos_scale * w_b / A`` for ``n = C // 3`` blocks (``BlockScale``)::

        # channels: [ v0x v0y v0z | v1x v1y v1z | ... | pass-through ]   block b turns by k_b tau(pos)
    """
    check_real("x", x)
    check_real("pos", pos, integer=True)
    blocks = block_scale.shape[0]
    if x.shape[-1] // 3 != blocks:
        raise ValueError(f"expected x of shape (..., C) with C // 3 == {blocks} blocks, got {tuple(x.shape)}")
    axis = -phase_vector(pos) if inverse else phase_vector(pos)
    rot = rodrigues(x[..., : 3 * blocks].unflatten(-1, (blocks, 3)), axis, block_scale).flatten(-2)
    if 3 * blocks == x.shape[-1]:
        return rot
    rest = x[..., 3 * blocks:]
    return torch.cat([rot, rest.expand(*rot.shape[:-1], rest.shape[-1])], dim=-1)


def relative_geope(x_j: Tensor, pos_i: Tensor, pos_j: Tensor, block_scale: Tensor, linear: bool = False) -> Tensor:
    """Keys ``x_j`` taken into the frame of queries at ``pos_i``: ``R(t_i)^T R(t_j) x_j`` (standard GeoPE) or
    ``R(t_j - t_i) x_j`` (``linear``), per block (``apply_geope``); shapes broadcast."""
    if linear:
        return apply_geope(x_j, pos_j - pos_i, block_scale)
    return apply_geope(apply_geope(x_j, pos_j, block_scale), pos_i, block_scale, inverse=True)


def frequencies(channels: int, base: float = 100.0) -> Tensor:
    """Block frequencies ``w_b = base ** (-2 b / (3 n))``, ``b = 0 .. n-1``, ``n = channels // 3``; ``base`` a
    finite number > 0 (``check_scale``)."""
    n = channels // 3
    if n < 1:
        raise ValueError(f"expected at least 3 channels for one rotation block, got {channels}")
    return check_scale("base", base) ** (-2.0 * torch.arange(n, dtype=torch.float64) / (3 * n))


_BLOCK_SCALES = FixedTables()   # fixed k_b, process-wide: modules of equal settings get the same tensor


class BlockScale(nn.Module):
    """GeoPE's block scales ``k_b = pos_scale * w_b / A``, ``(n,)`` for ``n = channels // 3`` blocks, with the
    frequencies ``w_b`` fixed (made in the caller's dtype, once per device and dtype: ``n`` numbers, so a
    float64 run is float64 throughout) or a trainable parameter ``freq`` (initialised to the same values).

    Args:
        channels: feature width ``C``.
        base: frequency base (the paper's lambda), a finite number > 0.
        pos_scale: phase per unit of position at block 0 (``1 / grid_size`` gives voxel units), finite and > 0;
            every ``k_b`` within ``[2^-126, 2^66]`` (``geope_checks.check_phase_scales``: float32 phases of any
            accepted coordinate finite, no frequency rounded to 0).
        axes: ``A``.
        learnable: train the frequencies.
    """

    def __init__(self, channels: int, base: float = 100.0, pos_scale: float = 25.0, axes: int = 3,
                 learnable: bool = False):
        super().__init__()
        base, pos_scale = check_scale("base", base), check_scale("pos_scale", pos_scale)
        if isinstance(axes, bool) or axes not in (1, 2, 3):
            raise ValueError(f"expected axes in (1, 2, 3), got {axes!r}")
        if channels < 3:
            raise ValueError(f"expected at least 3 channels for one rotation block, got {channels}")
        n = channels // 3                                    # w_b = base^(-2b / (3n)), b < n: phases within range
        check_phase_scales(base, pos_scale, -2 * (n - 1) / (3 * n), axes)
        self.channels, self.base, self.pos_scale, self.axes = channels, base, pos_scale, axes
        self.freq = nn.Parameter(frequencies(channels, base).float()) if learnable else None

    @property
    def learnable(self) -> bool:
        return self.freq is not None

    def forward(self, dtype: torch.dtype, device: torch.device) -> Tensor:
        """``k_b`` in ``dtype`` on ``device`` (a function of ``freq`` when learnable). Fixed ones are made once
        per device, dtype and settings and kept (not in the ``state_dict``): a copy from the host at every call
        would wait for a GPU's queue to drain. Modules of equal settings share the one tensor, so the layers
        of a stage share their rotation tables (``pointgeope.model.stage_memo.shared``)."""
        if self.freq is not None:
            return self.freq.to(device, dtype) * self.pos_scale / self.axes
        key = (torch.device(device), dtype, self.channels, self.base, self.pos_scale, self.axes)
        return _BLOCK_SCALES.get(key, lambda: frequencies(self.channels, self.base).to(device, dtype)
                               * self.pos_scale / self.axes)

    def extra_repr(self) -> str:
        return f"base={self.base}, pos_scale={self.pos_scale}, axes={self.axes}, learnable={self.learnable}"


class GeoPE(nn.Module):
    """Rotate features by the GeoPE rotations of their positions.

    Args:
        channels: feature width ``C``; ``C // 3`` blocks rotate, ``C mod 3`` channels pass through.
        axes: number of position axes ``A`` (3 for point clouds).
        base: frequency base (the paper's lambda), a finite number > 0.
        pos_scale: phase per unit of position at block 0; ``1 / grid_size`` gives voxel units; finite and > 0.
        learnable: make the block frequencies a trainable parameter (``block_scale.freq``).
        check_finite: check that the positions are finite and within ``+-2^60`` (``check_coordinates``' rule:
            beyond ~1.8e19 float32's axis norm overflows to NaN features), one host read a call (on a GPU, one
            synchronisation), as ``qk_encodings.QKEncoding``'s; ``False`` where the caller checked its positions
            once where they entered (a network, a benchmark's loop): then nothing is read.

    Shapes:
        ``x (..., C)``, ``pos (..., A)`` broadcastable to ``x``'s leading dims -> ``(..., C)``.
    """

    def __init__(self, channels: int, axes: int = 3, base: float = 100.0, pos_scale: float = 25.0,
                 learnable: bool = False, check_finite: bool = True):
        super().__init__()
        self.block_scale = BlockScale(channels, base, pos_scale, axes, learnable)  # checks every argument
        self.channels, self.axes, self.blocks = channels, axes, channels // 3
        self.check_finite = check_finite
        self.base, self.pos_scale = self.block_scale.base, self.block_scale.pos_scale

    def forward(self, x: Tensor, pos: Tensor, inverse: bool = False) -> Tensor:
        """``R(t(pos)) x`` per block, or ``R(t(pos))^T x`` with ``inverse=True``; ``pos`` checked (``check_finite``)."""
        self._check_positions(pos=pos)
        return apply_geope(x, pos, self._block_scales(x, pos), inverse)

    def relative(self, x_j: Tensor, pos_i: Tensor, pos_j: Tensor, linear: bool = False) -> Tensor:
        """Take keys ``x_j`` into the frame of queries at ``pos_i``: standard ``R(t_i)^T R(t_j) x_j``, linear
        ``R(t_j - t_i) x_j``. Shapes broadcast, e.g. ``x_j (N, k, C)``, ``pos_i (N, 1, A)``, ``pos_j (N, k, A)``;
        both positions checked in one read (``check_finite``)."""
        self._check_positions(pos_i=pos_i, pos_j=pos_j)
        return relative_geope(x_j, pos_i, pos_j, self._block_scales(x_j, pos_j, pos_i), linear)

    def _check_positions(self, **positions: Tensor) -> None:
        """``check_coordinates`` of each of ``positions`` with one host read for them all (skipped without
        ``check_finite``, and while compiling or scripting); the message names the first one refused."""
        if not self.check_finite or torch.jit.is_scripting() or torch.compiler.is_compiling():
            return
        for name, p in positions.items():
            check_real(name, p, integer=True)                    # a dtype: complex and bool are a TypeError
        flags = [coordinates_outside(p).any() for p in positions.values() if not p.is_meta]
        if flags and bool(torch.stack([f.to(flags[0].device) for f in flags]).any()):
            for name, p in positions.items():
                check_coordinates(name, p)

    def _block_scales(self, x: Tensor, pos: Tensor, *more_pos: Tensor) -> Tensor:
        """``k_b`` in the dtype the rotation runs in, after checking the shapes of ``x`` and the positions."""
        if x.shape[-1] != self.channels:
            raise ValueError(f"expected x of shape (..., {self.channels}), got {tuple(x.shape)}")
        for p in (pos, *more_pos):
            if p.shape[-1] != self.axes:
                raise ValueError(f"expected pos of shape (..., {self.axes}), got {tuple(p.shape)}")
        try:                                             # torch's own error named no argument
            torch.broadcast_shapes(x.shape[:-1], *(p.shape[:-1] for p in (pos, *more_pos)))
        except RuntimeError:
            got = " and ".join(str(tuple(p.shape)) for p in (pos, *more_pos))
            raise ValueError(f"expected positions whose leading dims broadcast against x's {tuple(x.shape[:-1])}, "
                             f"got {got}") from None
        return self.block_scale(geometry_dtype(torch.promote_types(x.dtype, pos.dtype)), pos.device)

    def extra_repr(self) -> str:
        return (f"channels={self.channels}, axes={self.axes}, base={self.base}, pos_scale={self.pos_scale}, "
                f"learnable={self.block_scale.learnable}")
