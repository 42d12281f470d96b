"""A unit normal per point, estimated from its neighbours: ``prepare`` stores it, ``predict`` estimates a scan's.

The estimate works on the cloud's distinct positions :math:`P` (points that share one position count once, and
each gets its position's normal: a resampled object that repeats a point 5,000 times does not make that point a
surface of its own). For each position :math:`p_i` of :math:`P`, with :math:`N_i` its ``k`` nearest positions of
:math:`P` (itself included; ``k`` at most :math:`|P|`)::

    mu_i = 1/k  sum_{q in N_i} q
    C_i  = 1/k  sum_{q in N_i} (q - mu_i)(q - mu_i)^T        (3, 3), eigenvalues l0 <= l1 <= l2
    n_i  = the unit eigenvector of l0                       (the normal of the plane fitted by least squares)

then oriented towards a viewpoint :math:`v`, ``n_i . (v - p_i) >= 0``:

- a room (any cloud neither flat nor a line): :math:`v = c`, the centre of the cloud's axis-aligned bounding box. A
  scanner stands inside the room it scans, so walls get normals that face into the room, the floor +z and the
  ceiling -z, as the mesh normals of Pointcept's S3DIS (the face of the scanned side);
- a flat cloud (a floor patch, a wall or a table top scanned alone): the covariance of all its positions has
  eigenvalues ``L0 <= L1 <= L2`` with ``L0 <= FLAT^2 L1`` (its thickness at most ``FLAT`` times its width) and
  ``L1 > DEGENERATE L2`` (not a line). Its box centre lies on the surface, where ``n . (c - p)`` is the noise of
  the normal and the sign would flip from point to point;
  there ``v = c + D m``, a viewer as far above the cloud as its box is wide (``D`` the box's largest side),
  with ``m`` the unit eigenvector of ``L0`` (the normal of the cloud's plane) on its +z side (``m_z > 0``; for
  a vertical plane, ``m_z == 0``, its largest component positive). A floor patch gets +z everywhere (a normal
  tilted by noise flips only beyond ~54 degrees), a lone ceiling patch +z too (which of the two a flat scan is
  cannot be told from its points), and what stands on the patch faces the box centre as in a room. A flat cloud
  on two sheets (:func:`_two_sheets`: a storey some 17 times wider than high, its floor and ceiling
  each at least ``SHEET`` of its positions and farther apart than two neighbourhoods) has its box centre between
  them, not on a surface: ``v = c``, as a room (a viewer above turned its ceiling up);
- a cloud on one line (``L1 <= DEGENERATE L2``: off the line by at most ~1e-4 of its length, as a line of
  points made by a program; a scanned cable has a thickness, and faces its axis as a room), whose box centre
  lies on it too: ``v = c + D u``, with ``u`` the normal of the line (below), so that every normal is ``u``.

Where ``n_i . (v - p_i) == 0`` (a point at the centre, or a normal at right angles to it) the sign makes the
largest component (the first of equal ones) positive.

A neighbourhood that fixes no plane gets a defined normal, never NaN:

- a cloud of one position (or ``k = 1``): +z;
- its positions on one line (``l1 <= DEGENERATE * l2``; two distinct positions, a scan line): the unit vector at
  right angles to the line closest to +z (+x for a vertical line);

each then oriented as above.

Coordinates are taken relative to the box centre in float64 (a georeferenced scan at y = 4e6 m keeps its
millimetres) and sorted in Morton order (:func:`_morton_order`), where equal positions fall together and are
merged; the neighbours are found with ``pykdtree`` on the distinct positions as float32 (OpenMP: its threads
follow ``OMP_NUM_THREADS``), ``CHUNK`` positions at a time, and each covariance and its eigenvectors (cyclic
Jacobi rotations, float64) computed by one compiled loop (numba), so that memory stays bounded (the coordinates
three times, plus ~8 MB of indices, whatever ``N``). The result depends on the coordinates only: the same cloud
gives the same bytes, in any row order, at any thread count.

Cost and the choice of :data:`K_NORMAL`: ``docs/s3dis/prepare.md`` ("Normals").
"""
from __future__ import annotations

import numba
import numpy as np

from pointgeope.morton_code import code
from pointgeope.number_kind import is_integer

K_NORMAL = 30  # neighbours per normal (Open3D's default; measured on real rooms in docs/s3dis/prepare.md)
CHUNK = 1 << 15  # points per kNN query: (CHUNK, k) int64 indices ~ 8 MB at k = 30
NORMAL_VERSION = 2  # the estimate's version: bumped whenever estimate_normals' output changes for some input
# (1: points, not positions, and the box centre for every cloud; 2: distinct positions, a flat cloud's viewer)
DEGENERATE = 1e-8  # l1 / l2 at or below it: the neighbourhood is a line (float32 rounding gives ~1e-9)
FLAT = 0.1  # a cloud whose thickness (std across its plane) is at most this share of its width is flat
SHEET = 0.1  # the share of a flat cloud's positions that makes a sheet of it (a storey's floor or ceiling)


def estimate_normals(coord: np.ndarray, k: int = K_NORMAL) -> np.ndarray:
    """The unit normal of each point (module docstring).

    Args:
        coord: ``(N, 3)`` float coordinates (any N >= 0), finite.
        k: neighbouring positions per position, itself included (at most the number of distinct positions).

    Returns:
        ``(N, 3)`` float32, each row of unit length.

    Raises:
        ValueError: ``coord`` not of shape ``(N, 3)``, holding a non-finite value, or ``k < 1``.
    """
    coord = np.asarray(coord)
    if coord.ndim != 2 or coord.shape[1] != 3:
        raise ValueError(f"expected coord of shape (N, 3), got {coord.shape}")
    if not is_integer(k) or k < 1:
        raise ValueError(f"expected k an integer >= 1, got {k!r}")
    normals = np.empty((len(coord), 3), dtype=np.float32)
    if not len(coord):
        return normals
    if not np.isfinite(coord).all():
        raise ValueError("expected finite coordinates, got NaN or inf")
    lo, hi = coord.min(axis=0).astype(np.float64), coord.max(axis=0).astype(np.float64)
    local = np.subtract(coord, (lo + hi) / 2, dtype=np.float64)  # the box centre at 0: c - p = -local
    local += 0.0  # -0.0 -> 0.0: one position, one set of bytes, whichever of its rows comes first
    order = _morton_order(local, hi - lo)
    local = local[order]  # in Morton order: neighbours close in memory (the kNN search 3-5x faster), equal
    first = np.ones(len(local), dtype=bool)  # positions next to each other
    first[1:] = (local[1:] != local[:-1]).any(axis=1)
    repeated = not first.all()
    if repeated:
        position = np.cumsum(first) - 1  # row (in this order) -> its distinct position
        local = local[first]
    k = int(min(k, len(local)))
    tiny = (1e-9 * (1.0 + float((hi - lo).max()))) ** 2  # a spread below 1e-9 of the extent: one point
    from pykdtree.kdtree import KDTree

    search = local.astype(np.float32)  # the neighbours only: float32 relative to the centre keeps micrometres
    tree = KDTree(search)
    view = _viewpoint(local, float((hi - lo).max()), lambda: _reach(tree, search, k))
    distinct = np.empty((len(local), 3), dtype=np.float32)
    for start in range(0, len(local), CHUNK):
        _, index = tree.query(search[start:start + CHUNK], k=k)
        index = np.ascontiguousarray(np.asarray(index, dtype=np.int64).reshape(-1, k))
        _normals_of(local, index, start, view, tiny, DEGENERATE, distinct)
    normals[order] = distinct[position] if repeated else distinct
    return normals


def _morton_order(local: np.ndarray, extent: np.ndarray) -> np.ndarray:
    """The permutation that sorts ``local (N, 3)`` (within a box of size ``extent`` around 0) along the Morton
    (Z-order) curve (:func:`pointgeope.morton_code.code`) of a 2^21 grid over the box, the points of one cell by
    their coordinates (x, then y, then z): consecutive points are near in space at every scale, so that the
    tree's nodes a query visits are those the last one did (a room given in random order took 13 us a point,
    in this order 2.5), and equal positions are consecutive. The order is one of the coordinates alone (rows
    that come in another order give the same sorted cloud), and with it which of equally near neighbours the
    search returns."""
    scale = ((1 << 21) - 1) / max(float(extent.max()), 1e-300)
    cells = [np.clip((local[:, axis] * scale + (1 << 20)), 0, (1 << 21) - 1).astype(np.uint64) for axis in range(3)]
    keys = code(*cells)
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    same = keys[1:] == keys[:-1]  # cells of more than one point (duplicates, mostly): sorted by coordinates
    if same.any():
        shared = np.flatnonzero(np.r_[same, False] | np.r_[False, same])  # contiguous runs, in key order
        rows = order[shared]
        order[shared] = rows[np.lexsort((local[rows, 2], local[rows, 1], local[rows, 0], keys[shared]))]
    return order


def _viewpoint(local: np.ndarray, extent: float, reach) -> np.ndarray:
    """The point ``v (3,)`` the normals face (module docstring), relative to the box centre: ``0`` (the centre)
    but for a flat cloud of the distinct positions ``local (M, 3)`` on one sheet, ``extent`` (the box's largest
    side) above it on the +z side of the cloud's plane, and for a cloud on one line as far along the line's
    normal. ``reach()``: the neighbourhoods' radius (:func:`_reach`), asked of a flat cloud alone."""
    vectors, values = _plane(local)
    if values[2] > 0.0 and values[1] <= DEGENERATE * values[2]:  # a line: every normal is _across of it
        m = _across(vectors[:, 2])
        return extent / np.sqrt(m @ m) * m
    m = vectors[:, 0]
    if not (values[1] > DEGENERATE * values[2] and values[0] <= FLAT * FLAT * values[1]) or _two_sheets(
            local, m, reach()):
        return np.zeros(3)
    up = m[2] if m[2] != 0.0 else m[int(np.argmax(np.abs(m)))]  # +z side; a vertical plane: largest positive
    return (extent if up > 0.0 else -extent) * m


def _reach(tree, search: np.ndarray, k: int) -> float:
    """The median distance from a position to its ``k``-th nearest (the radius of a neighbourhood), over every
    ``M // 1024``-th of the positions ``search (M, 3)`` in their (Morton) order: the scale at which the normals
    see the surface, the same for any row order."""
    distance, _ = tree.query(search[::max(1, len(search) // 1024)], k=k)
    return float(np.median(np.asarray(distance, dtype=np.float64).reshape(-1, k)[:, -1]))


def _two_sheets(local: np.ndarray, m: np.ndarray, reach: float) -> bool:
    """Whether a flat cloud's positions ``local (M, 3)`` lie on two sheets at right angles to its plane normal
    ``m (3,)`` with the box centre between them (a storey some 17 times wider than high: its floor and
    its ceiling): with ``s = m . p``, the bands ``reach`` thick at each end of the range of ``s`` do not meet and
    each holds at least ``SHEET`` of the positions. Sheets closer than two neighbourhoods (a floor scanned twice,
    a few millimetres apart) are one surface."""
    s = local[:, 0] * m[0] + local[:, 1] * m[1] + local[:, 2] * m[2]
    lo, hi = float(s.min()), float(s.max())
    if hi - lo <= 2.0 * reach:
        return False
    return min(np.count_nonzero(s <= lo + reach), np.count_nonzero(s >= hi - reach)) >= SHEET * len(s)


@numba.njit(cache=True)
def _across(d):  # pragma: no cover (compiled)
    """A vector (not of unit length) at right angles to the unit ``d (3,)``, the closest to +z (+x where ``d`` is
    vertical): the normal of a line of direction ``d``."""
    n = np.empty(3)
    n[0], n[1], n[2] = -d[2] * d[0], -d[2] * d[1], 1.0 - d[2] * d[2]
    if np.sqrt(n[0] ** 2 + n[1] ** 2 + n[2] ** 2) < 1e-6:
        n[0], n[1], n[2] = 1.0 - d[0] * d[0], -d[0] * d[1], -d[0] * d[2]
    return n


@numba.njit(cache=True)
def _plane(local):  # pragma: no cover (compiled)
    """``(vectors (3, 3), values (3,))``: the eigenvectors (columns) and eigenvalues, ascending, of the covariance
    of all of ``local (M, 3)`` (float64, summed in one order: the same bytes whatever the threads)."""
    mean = np.zeros(3)
    for i in range(local.shape[0]):
        for a in range(3):
            mean[a] += local[i, a]
    mean /= max(local.shape[0], 1)
    cov = np.zeros((3, 3))
    for i in range(local.shape[0]):
        for a in range(3):
            for b in range(a, 3):
                cov[a, b] += (local[i, a] - mean[a]) * (local[i, b] - mean[b])
    for a in range(3):
        for b in range(a, 3):
            cov[a, b] /= max(local.shape[0], 1)
            cov[b, a] = cov[a, b]
    vectors = np.empty((3, 3))
    _jacobi(cov, vectors)
    rank = np.argsort(np.array([cov[0, 0], cov[1, 1], cov[2, 2]]))
    return vectors[:, rank].copy(), np.array([cov[rank[0], rank[0]], cov[rank[1], rank[1]], cov[rank[2], rank[2]]])


@numba.njit(cache=True)
def _normals_of(local, index, start, view, tiny, degenerate, out):  # pragma: no cover (compiled)
    """``out[start + i]`` = the normal of ``local[start + i]`` (module docstring) from the indices ``index[i]``
    of its neighbours in ``local``: their covariance (float64), its eigenvectors by :func:`_jacobi`, the
    degenerate cases, then the orientation towards ``view``."""
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
            n[:] = _across(vectors[:, rank[2]])
        n /= np.sqrt(n[0] ** 2 + n[1] ** 2 + n[2] ** 2)
        p = start + i
        facing = n[0] * (view[0] - local[p, 0]) + n[1] * (view[1] - local[p, 1]) + n[2] * (view[2] - local[p, 2])
        if facing == 0.0:
            facing = n[np.argmax(np.abs(n))]  # the largest component (the first of equal ones) positive
        sign = -1.0 if facing < 0.0 else 1.0
        for a in range(3):
            out[p, a] = sign * n[a]


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
