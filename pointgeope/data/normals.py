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
millimetres); the neighbours are found with ``pykdtree`` on these as float32 (OpenMP: its threads follow
``OMP_NUM_THREADS``), ``CHUNK`` points at a time, and each covariance and its eigenvectors (cyclic Jacobi
rotations, float64) computed by one compiled loop (numba), so that memory stays bounded (the coordinates twice,
plus ~8 MB of indices, whatever ``N``). The result depends on the coordinates only: the same cloud gives the
same bytes, at any thread count.

Cost and the choice of :data:`K_NORMAL`: ``docs/s3dis/prepare.md`` ("Normals").
"""
from __future__ import annotations

import numba
import numpy as np

from pointgeope.morton_code import code

K_NORMAL = 30  # neighbours per normal (Open3D's default; measured on real rooms in docs/s3dis/prepare.md)
CHUNK = 1 << 15  # points per kNN query: (CHUNK, k) int64 indices ~ 8 MB at k = 30
NORMAL_VERSION = 1  # the estimate's version: bumped whenever estimate_normals' output changes for some input
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
    lo, hi = coord.min(axis=0).astype(np.float64), coord.max(axis=0).astype(np.float64)
    local = np.subtract(coord, (lo + hi) / 2, dtype=np.float64)  # the box centre at 0: c - p = -local
    k = int(min(k, len(local)))
    tiny = (1e-9 * (1.0 + float((hi - lo).max()))) ** 2  # a spread below 1e-9 of the extent: one point
    from pykdtree.kdtree import KDTree

    order = _morton_order(local, hi - lo)
    local = local[order]  # in Morton order: neighbours close in memory, the kNN search 3-5x faster
    search = local.astype(np.float32)  # the neighbours only: float32 relative to the centre keeps micrometres
    tree = KDTree(search)
    for start in range(0, len(local), CHUNK):
        _, index = tree.query(search[start:start + CHUNK], k=k)
        index = np.ascontiguousarray(np.asarray(index, dtype=np.int64).reshape(-1, k))
        _normals_of(local, index, start, order, tiny, DEGENERATE, normals)
    return normals


def _morton_order(local: np.ndarray, extent: np.ndarray) -> np.ndarray:
    """The permutation that sorts ``local (N, 3)`` (within a box of size ``extent`` around 0) along the Morton
    (Z-order) curve (:func:`pointgeope.morton_code.code`) of a 2^21 grid over the box, ties by index:
    consecutive points are near in space at every scale, so that the tree's nodes a query visits are those the
    last one did (a room given in random order took 13 us a point, in this order 2.5). At 2^21 cells a side
    distinct points share a cell hardly ever, so the order, and with it which of equally near neighbours the
    search returns, is one of the coordinates and not of the rows' order."""
    scale = ((1 << 21) - 1) / max(float(extent.max()), 1e-300)
    cells = [np.clip((local[:, axis] * scale + (1 << 20)), 0, (1 << 21) - 1).astype(np.uint64) for axis in range(3)]
    return np.argsort(code(*cells), kind="stable")


@numba.njit(cache=True)
def _normals_of(local, index, start, order, tiny, degenerate, out):  # pragma: no cover (compiled)
    """``out[order[start + i]]`` = the oriented normal of ``local[start + i]`` (module docstring) from the
    indices ``index[i]`` of its neighbours in ``local``: their covariance (float64), its eigenvectors by
    :func:`_jacobi`, the degenerate cases, then the orientation."""
    k = index.shape[1]
    cov = np.empty((3, 3))
    vectors = np.empty((3, 3))
    for i in range(index.shape[0]):
        mean = np.zeros(3)
        for j in range(k):
            for a in range(3):
                mean[a] += local[index[i, j], a]
        mean /= k
        cov[:] = 0.0
        for j in range(k):
            q = index[i, j]
            for a in range(3):
                for b in range(a, 3):
                    cov[a, b] += (local[q, a] - mean[a]) * (local[q, b] - mean[b])
        for a in range(3):
            for b in range(a, 3):
                cov[a, b] /= k
                cov[b, a] = cov[a, b]
        _jacobi(cov, vectors)
        rank = np.argsort(np.array([cov[0, 0], cov[1, 1], cov[2, 2]]))  # ascending eigenvalues
        l1, l2 = cov[rank[1], rank[1]], cov[rank[2], rank[2]]
        n = vectors[:, rank[0]].copy()
        if l2 <= tiny:  # one point
            n[:] = 0.0
            n[2] = 1.0
        elif l1 <= degenerate * l2:  # a line: at right angles to it, closest to +z (+x for a vertical line)
            d = vectors[:, rank[2]]
            n[0], n[1], n[2] = -d[2] * d[0], -d[2] * d[1], 1.0 - d[2] * d[2]
            if np.sqrt(n[0] ** 2 + n[1] ** 2 + n[2] ** 2) < 1e-6:
                n[0], n[1], n[2] = 1.0 - d[0] * d[0], -d[0] * d[1], -d[0] * d[2]
        n /= np.sqrt(n[0] ** 2 + n[1] ** 2 + n[2] ** 2)
        p = start + i
        facing = -(n[0] * local[p, 0] + n[1] * local[p, 1] + n[2] * local[p, 2])  # n . (c - p), c = 0
        if facing == 0.0:
            facing = n[np.argmax(np.abs(n))]  # the largest component (the first of equal ones) positive
        sign = -1.0 if facing < 0.0 else 1.0
        for a in range(3):
            out[order[p], a] = sign * n[a]


@numba.njit(cache=True)
def _jacobi(a, v):  # pragma: no cover (compiled)
    """Diagonalise the symmetric ``a (3, 3)`` in place by cyclic Jacobi rotations: its diagonal becomes the
    eigenvalues and the columns of ``v`` the unit eigenvectors, to rounding (exact for 0 off-diagonal)."""
    v[:] = 0.0
    for i in range(3):
        v[i, i] = 1.0
    for _ in range(50):
        off = a[0, 1] ** 2 + a[0, 2] ** 2 + a[1, 2] ** 2
        if off == 0.0 or off <= 1e-36 * (a[0, 0] ** 2 + a[1, 1] ** 2 + a[2, 2] ** 2):
            return
        for p, q in ((0, 1), (0, 2), (1, 2)):
            if a[p, q] == 0.0:
                continue
            theta = (a[q, q] - a[p, p]) / (2.0 * a[p, q])
            t = 1.0 / (abs(theta) + np.sqrt(theta * theta + 1.0))
            if theta < 0.0:
                t = -t
            c = 1.0 / np.sqrt(t * t + 1.0)
            s = t * c
            for r in range(3):  # a <- a J (columns p, q)
                arp, arq = a[r, p], a[r, q]
                a[r, p], a[r, q] = c * arp - s * arq, s * arp + c * arq
            for r in range(3):  # a <- J^T a (rows p, q)
                apr, aqr = a[p, r], a[q, r]
                a[p, r], a[q, r] = c * apr - s * aqr, s * apr + c * aqr
            for r in range(3):
                vrp, vrq = v[r, p], v[r, q]
                v[r, p], v[r, q] = c * vrp - s * vrq, s * vrp + c * vrq
