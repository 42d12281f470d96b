"""Geometry primitives of the synthetic S3DIS rooms: surfaces as sets of parallelograms, sampled uniformly.

Every surface the generator places (a wall, a table top, a chair leg) is a parallelogram
``origin + s * u + t * v`` with ``s, t`` in ``[0, 1]``. A set of ``P`` of them is a :class:`Patches`::

    origin (P, 3)   u (P, 3)   v (P, 3)      metres; the area of patch p is |u_p x v_p|

Objects are built in a local frame (x along the wall they stand against, y away from it into the room,
z up), then placed with :func:`place`, a rotation about z by a multiple of 90 degrees and a shift, so that
everything stays axis-aligned and each solid object is described by an axis-aligned box (used to hide
the wall, floor or ceiling points it covers, see :func:`inside_any`).

Sampling is vectorised: :func:`sample` draws patch indices with probability proportional to area and
``(s, t)`` uniformly, one numpy call each; there is no loop over points.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Faces of an axis-aligned box, named by their outward normal.
BOX_FACES = ("-x", "+x", "-y", "+y", "-z", "+z")


@dataclass(frozen=True)
class Patches:
    """``P`` parallelograms ``origin + s * u + t * v`` (all arrays float64 ``(P, 3)``, metres)."""

    origin: np.ndarray
    u: np.ndarray
    v: np.ndarray

    def __post_init__(self) -> None:
        for name in ("origin", "u", "v"):
            arr = getattr(self, name)
            if arr.ndim != 2 or arr.shape[1] != 3 or arr.shape != self.origin.shape:
                raise ValueError(f"expected {name} of shape (P, 3) like origin {self.origin.shape}, "
                                 f"got {arr.shape}")

    def __len__(self) -> int:
        return self.origin.shape[0]

    def areas(self) -> np.ndarray:
        """Area of each patch, float64 ``(P,)`` in m^2."""
        return np.linalg.norm(np.cross(self.u, self.v), axis=1)

    def bounds(self) -> np.ndarray:
        """Axis-aligned bounding box of all patches, float64 ``(2, 3)``: ``[min, max]``."""
        corners = np.concatenate([self.origin, self.origin + self.u, self.origin + self.v,
                                  self.origin + self.u + self.v])
        return np.stack([corners.min(0), corners.max(0)])


def concat(parts: list[Patches]) -> Patches:
    """One :class:`Patches` holding the patches of all ``parts`` in order."""
    return Patches(np.concatenate([p.origin for p in parts]), np.concatenate([p.u for p in parts]),
                   np.concatenate([p.v for p in parts]))


def rect(origin, u, v) -> Patches:
    """A single parallelogram with corner ``origin`` and edges ``u``, ``v`` (each a 3-vector)."""
    return Patches(np.asarray(origin, float)[None], np.asarray(u, float)[None], np.asarray(v, float)[None])


def box(lo, hi, skip: tuple[str, ...] = ()) -> Patches:
    """The faces of the axis-aligned box ``[lo, hi]`` (3-vectors), less the faces named in ``skip``.

    ``skip`` takes names from :data:`BOX_FACES`, e.g. ``("-z",)`` for an object standing on the floor
    (its bottom is never seen) or ``("-y",)`` for one standing against a wall. Returns up to 6 patches.
    """
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    if np.any(hi < lo):
        raise ValueError(f"expected a box with lo <= hi, got lo={lo.tolist()} hi={hi.tolist()}")
    size = hi - lo
    ex, ey, ez = np.diag(size)
    faces = {
        "-x": (lo, ey, ez), "+x": (lo + ex, ey, ez),
        "-y": (lo, ex, ez), "+y": (lo + ey, ex, ez),
        "-z": (lo, ex, ey), "+z": (lo + ez, ex, ey),
    }
    unknown = set(skip) - set(BOX_FACES)
    if unknown:
        raise ValueError(f"expected faces among {BOX_FACES}, got {sorted(unknown)}")
    kept = [faces[name] for name in BOX_FACES if name not in skip]
    return Patches(np.array([f[0] for f in kept]), np.array([f[1] for f in kept]),
                   np.array([f[2] for f in kept]))


def rotation_z(quarter_turns: int) -> np.ndarray:
    """The exact rotation about z by ``quarter_turns * 90`` degrees, float64 ``(3, 3)``."""
    c, s = [(1, 0), (0, 1), (-1, 0), (0, -1)][quarter_turns % 4]
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]], dtype=float)


def place(patches: Patches, quarter_turns: int, shift) -> Patches:
    """Patches built in a local frame, rotated about z by ``quarter_turns * 90`` degrees then shifted."""
    rot = rotation_z(quarter_turns)
    return Patches(patches.origin @ rot.T + np.asarray(shift, float), patches.u @ rot.T, patches.v @ rot.T)


def place_box(lo, hi, quarter_turns: int, shift) -> np.ndarray:
    """The axis-aligned box ``[lo, hi]`` of a local frame after :func:`place`, float64 ``(2, 3)``."""
    rot = rotation_z(quarter_turns)
    corners = np.array([lo, hi], float) @ rot.T + np.asarray(shift, float)
    return np.stack([corners.min(0), corners.max(0)])


def point_count(area: float, density: float, minimum: int) -> int:
    """Number of points for a surface of ``area`` m^2 at ``density`` points per m^2, at least ``minimum``."""
    return max(int(minimum), int(round(area * density)))


def sample(patches: Patches, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` points uniform on the union of the patches (each patch in proportion to its area).

    Returns float64 ``(n, 3)``. Patches of zero area receive no points.
    """
    areas = patches.areas()
    total = areas.sum()
    if total <= 0:
        raise ValueError(f"expected patches with a positive total area, got {total}")
    idx = rng.choice(len(patches), size=n, p=areas / total)
    st = rng.random((n, 2))
    return patches.origin[idx] + st[:, :1] * patches.u[idx] + st[:, 1:] * patches.v[idx]


def inside_any(points: np.ndarray, boxes: np.ndarray, margin: float) -> np.ndarray:
    """Which points lie inside any of the axis-aligned boxes grown by ``margin`` on every side.

    Args:
        points: float64 ``(N, 3)``.
        boxes: float64 ``(B, 2, 3)``, ``boxes[b] = [min, max]``.
    Returns:
        bool ``(N,)``.
    """
    if len(boxes) == 0:
        return np.zeros(len(points), dtype=bool)
    lo = boxes[:, 0] - margin  # (B, 3)
    hi = boxes[:, 1] + margin
    # (N, B, 3) comparisons: boxes per room are a few dozen, points a few 10^5 -> chunk over points.
    out = np.empty(len(points), dtype=bool)
    step = max(1, 4_000_000 // max(1, len(boxes)))
    for start in range(0, len(points), step):
        p = points[start:start + step, None, :]
        out[start:start + step] = np.any(np.all((p >= lo) & (p <= hi), axis=2), axis=1)
    return out
