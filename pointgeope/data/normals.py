"""A unit normal per point, estimated from its neighbours: ``prepare`` stores it, ``predict`` estimates a scan's.

For each point :math:`p_i` of a cloud, with :math:`N_i` its ``k`` nearest neighbours (itself included)::

    mu_i = 1/k  sum_{q in N_i} q
    C_i  = 1/k  sum_{q in N_i} (q - mu_i)(q - mu_i)^T        (3, 3), eigenvalues l0 <= l1 <= l2
    n_i  = the unit eigenvector of l0                       (the normal of the plane fitted by least squares)

then oriented towards the centre :math:`c` of the cloud's axis-aligned bounding box,
``n_i . (c - p_i) >= 0``: a scanner stands inside the room it scans, so walls get normals that face into the
room, the floor +z and the ceiling -z, as the mesh normals of Pointcept's S3DIS (the face of the scanned side).
Where ``n_i . (c - p_i) == 0`` (a point at the centre, or a normal at right angles to it) the sign makes the
largest component (the first of equal ones) positive.

A neighbourhood that fixes no plane gets a defined normal, never NaN:

- all its points one point (duplicates; a cloud of one point): +z;
- its points on one line (``l1 <= DEGENERATE * l2``; two distinct points, a scan line): the unit vector at right
  angles to the line closest to +z (+x for a vertical line);

each then oriented as above.

Coordinates are taken relative to the box centre in float64 (a georeferenced scan at y = 4e6 m keeps its
millimetres), the neighbours found with ``pykdtree`` (OpenMP: its threads follow ``OMP_NUM_THREADS``), and the
work done ``CHUNK`` points at a time, so that memory stays bounded (about 200 MB, whatever ``N``). The result
depends on the coordinates only: the same cloud gives the same bytes, at any thread count.

Cost and the choice of :data:`K_NORMAL`: ``docs/s3dis/prepare.md`` ("Normals").
"""
from __future__ import annotations

import numpy as np

K_NORMAL = 30  # neighbours per normal (Open3D's default; measured on real rooms in docs/s3dis/prepare.md)
CHUNK = 1 << 15  # points per block: (CHUNK, k, 3) float64 neighbours ~ 24 MB at k = 30
DEGENERATE = 1e-8  # l1 / l2 at or below it: the neighbourhood is a line (float32 rounding gives ~1e-9)


def estimate_normals(coord: np.ndarray, k: int = K_NORMAL) -> np.ndarray:
    """The unit normal of each point (module docstring).

    Args:
        coord: ``(N, 3)`` float coordinates (any N >= 0), finite.
        k: neighbours per point, itself included (at most N are used).

    Returns:
        ``(N, 3)`` float32, each row of unit length.

    Raises:
        ValueError: ``coord`` not of shape ``(N, 3)``, holding a non-finite value, or ``k < 1``.
    """
    coord = np.asarray(coord)
    if coord.ndim != 2 or coord.shape[1] != 3:
        raise ValueError(f"expected coord of shape (N, 3), got {coord.shape}")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"expected k an integer >= 1, got {k!r}")
    normals = np.empty((len(coord), 3), dtype=np.float32)
    if not len(coord):
        return normals
    if not np.isfinite(coord).all():
        raise ValueError("expected finite coordinates, got NaN or inf")
    coord = np.asarray(coord, dtype=np.float64)
    lo, hi = coord.min(axis=0), coord.max(axis=0)
    local = np.ascontiguousarray(coord - (lo + hi) / 2)  # the box centre at 0: c - p = -local
    k = int(min(k, len(local)))
    tiny = (1e-9 * (1.0 + float((hi - lo).max()))) ** 2  # a spread below 1e-9 of the extent: one point
    from pykdtree.kdtree import KDTree

    tree = KDTree(local)
    for start in range(0, len(local), CHUNK):
        points = local[start:start + CHUNK]
        _, index = tree.query(points, k=k)
        neighbours = local[np.asarray(index, dtype=np.int64).reshape(len(points), k)]
        normals[start:start + CHUNK] = _oriented(_pca_normals(neighbours, tiny), points)
    return normals


def _pca_normals(neighbours: np.ndarray, tiny: float) -> np.ndarray:
    """``(m, 3)`` float64 unit normals, up to sign, of ``(m, k, 3)`` neighbourhoods (module docstring)."""
    centred = neighbours - neighbours.mean(axis=1, keepdims=True)
    cov = np.matmul(centred.transpose(0, 2, 1), centred) / neighbours.shape[1]  # batched BLAS: 5x einsum
    values, vectors = np.linalg.eigh(cov)  # ascending eigenvalues; vectors[:, :, j] is the j-th eigenvector
    normals = vectors[:, :, 0]
    line = values[:, 1] <= DEGENERATE * values[:, 2]
    if line.any():
        direction = vectors[line, :, 2]
        up = np.array([0.0, 0.0, 1.0]) - direction[:, 2:3] * direction  # +z minus its part along the line
        flat = np.linalg.norm(up, axis=1) < 1e-6  # a vertical line: +x at right angles to it
        up[flat] = np.array([1.0, 0.0, 0.0]) - direction[flat, 0:1] * direction[flat]
        normals[line] = up / np.linalg.norm(up, axis=1, keepdims=True)
    normals[values[:, 2] <= tiny] = (0.0, 0.0, 1.0)
    return normals


def _oriented(normals: np.ndarray, local: np.ndarray) -> np.ndarray:
    """``normals`` flipped where they face away from the box centre (``local``: points minus that centre);
    where at right angles to it, the largest component positive (module docstring)."""
    facing = -np.einsum("mi,mi->m", normals, local)
    largest = normals[np.arange(len(normals)), np.argmax(np.abs(normals), axis=1)]
    sign = np.where(facing != 0, np.sign(facing), np.where(largest < 0, -1.0, 1.0))
    return normals * sign[:, None]
