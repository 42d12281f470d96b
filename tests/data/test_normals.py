"""pointgeope/data/normals.py: the normals against their definition, on clouds whose normals are known.

The references here are written from the definition (the module docstring), independently of the module: the
neighbours by a full distance sort, the plane by an SVD (not an eigendecomposition), the orientation by the
rule ``n . (c - p) >= 0`` with ``c`` the bounding box's centre.
"""
from __future__ import annotations

import numpy as np
import pytest

from pointgeope.data import normals as normals_module
from pointgeope.data.normals import K_NORMAL, estimate_normals


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def _reference(coord: np.ndarray, k: int) -> np.ndarray:
    """The definition, point by point: the k nearest by a full sort, the smallest right singular vector of the
    centred neighbours, oriented towards the box centre."""
    coord = np.asarray(coord, dtype=np.float64)
    centre = (coord.min(axis=0) + coord.max(axis=0)) / 2
    out = np.empty_like(coord)
    for i, p in enumerate(coord):
        nearest = coord[np.argsort(np.linalg.norm(coord - p, axis=1), kind="stable")[:k]]
        _, _, vt = np.linalg.svd(nearest - nearest.mean(axis=0))
        n = vt[-1]
        out[i] = n if n @ (centre - p) >= 0 else -n
    return out


def _box_room(rng, n_per_face: int = 3000, size=(6.0, 4.0, 3.0), noise: float = 0.002) -> tuple[np.ndarray, np.ndarray]:
    """Points on the six faces of a box (a room), each with its inward normal, faces' edges left out by 50 cm
    so that every point's ``K_NORMAL`` neighbours (within ~30 cm) lie on its own face."""
    size = np.asarray(size)
    points, normals = [], []
    for axis in range(3):
        for side in (0.0, 1.0):
            p = 0.5 + rng.random((n_per_face, 3)) * (size - 1.0)
            p[:, axis] = side * size[axis] + rng.normal(0, noise, n_per_face)
            n = np.zeros(3)
            n[axis] = 1.0 if side == 0.0 else -1.0  # inward: the floor up, the ceiling down
            points.append(p)
            normals.append(np.tile(n, (n_per_face, 1)))
    return np.concatenate(points), np.concatenate(normals)


def test_a_room_gets_inward_normals_floor_up_ceiling_down():
    coord, expected = _box_room(np.random.default_rng(0))
    got = estimate_normals(coord.astype(np.float32))
    assert got.dtype == np.float32 and got.shape == coord.shape
    cosine = np.einsum("ij,ij->i", got.astype(np.float64), expected)
    angle = np.degrees(np.arccos(np.clip(cosine, -1, 1)))  # noise 2 mm over ~20-30 cm: about half a degree
    assert np.median(angle) < 0.5 and angle.max() < 4.0  # and every one faces in (a flip would be ~180)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_tilted_noisy_plane_gives_its_normal(seed):
    rng = np.random.default_rng(seed)
    normal = _unit(rng.normal(size=3))
    u = _unit(np.cross(normal, [1.0, 0.0, 0.0] if abs(normal[0]) < 0.9 else [0.0, 1.0, 0.0]))
    v = np.cross(normal, u)
    ab = rng.random((3000, 2)) * 4
    coord = ab[:, :1] * u + ab[:, 1:] * v + rng.normal(0, 0.001, (3000, 1)) * normal + [10.0, -3.0, 2.0]
    got = estimate_normals(coord).astype(np.float64)
    assert np.abs(got @ normal).min() > np.cos(np.radians(3.0))  # the plane's normal, up to its orientation


def test_a_sphere_gets_radial_normals_towards_its_centre():
    rng = np.random.default_rng(4)
    centre = np.array([2.0, -1.0, 0.5])
    radial = _unit(rng.normal(size=(20000, 3)))
    coord = centre + 1.5 * radial
    got = estimate_normals(coord).astype(np.float64)
    cosine = np.einsum("ij,ij->i", got, -radial)  # the box centre is (about) the sphere's: normals point in
    assert cosine.min() > np.cos(np.radians(3.0))


def test_matches_a_brute_force_pca_of_each_point():
    rng = np.random.default_rng(5)
    coord = rng.random((60, 3)) * [3.0, 2.0, 0.5]
    for k in (3, 7, K_NORMAL):
        got = estimate_normals(coord, k=k).astype(np.float64)
        np.testing.assert_allclose(got, _reference(coord, k), rtol=0, atol=2e-6, err_msg=f"k={k}")


def test_a_rotation_by_right_angles_rotates_the_normals_exactly():
    """A rotation by multiples of 90 degrees maps the box centre onto the rotated box's, so the orientation rule
    commutes with it (an arbitrary rotation changes the axis-aligned box)."""
    rng = np.random.default_rng(6)
    coord = rng.random((500, 3)) * [4.0, 3.0, 1.0]
    rotation = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]) @ np.array(
        [[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]])
    got = estimate_normals(coord @ rotation.T).astype(np.float64)
    np.testing.assert_allclose(got, estimate_normals(coord).astype(np.float64) @ rotation.T, rtol=0, atol=1e-6)


def test_an_arbitrary_rotation_rotates_the_normals_up_to_their_sign():
    rng = np.random.default_rng(7)
    coord = _unit(rng.normal(size=(2000, 3))) * [3.0, 2.0, 1.0]  # an ellipsoid: normals vary smoothly
    q = _unit(rng.normal(size=4))
    w, x, y, z = q
    rotation = np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                         [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                         [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])
    rotated = estimate_normals(coord @ rotation.T).astype(np.float64)
    expected = estimate_normals(coord).astype(np.float64) @ rotation.T
    assert np.abs(np.einsum("ij,ij->i", rotated, expected)).min() > 1 - 1e-5


def test_a_georeferenced_offset_changes_nothing():
    coord, _ = _box_room(np.random.default_rng(8), n_per_face=300)
    near = estimate_normals(coord)
    far = estimate_normals(coord + [500123.0, 4000321.0, 12.0])
    np.testing.assert_allclose(far, near, rtol=0, atol=1e-5)


def test_unit_length_deterministic_and_the_same_whatever_the_chunk(monkeypatch):
    coord, _ = _box_room(np.random.default_rng(9), n_per_face=400)
    whole = estimate_normals(coord)
    np.testing.assert_allclose(np.linalg.norm(whole.astype(np.float64), axis=1), 1.0, rtol=0, atol=1e-6)
    assert estimate_normals(coord).tobytes() == whole.tobytes()
    monkeypatch.setattr(normals_module, "CHUNK", 7)
    assert estimate_normals(coord).tobytes() == whole.tobytes()


@pytest.mark.parametrize("coord, expected", [
    ([[1.0, 2.0, 3.0]], [[0, 0, 1]]),                                   # one point
    ([[1.0, 2.0, 3.0]] * 5, [[0, 0, 1]] * 5),                           # duplicates
    ([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0]], [[0, 0, 1]] * 2),               # two points: a line along x
    ([[0.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 2.0]], [[1, 0, 0]] * 3),  # a vertical line: +x
])
def test_degenerate_neighbourhoods_get_the_defined_normal(coord, expected):
    np.testing.assert_array_equal(estimate_normals(np.array(coord)), np.array(expected, dtype=np.float32))


def test_a_line_gets_the_normal_at_right_angles_closest_to_up_facing_the_centre():
    t = np.linspace(0.0, 1.0, 20)[:, None]
    direction = _unit(np.array([1.0, 1.0, 1.0]))
    line = t * direction
    up = _unit(np.array([0.0, 0.0, 1.0]) - direction[2] * direction)  # +z minus its part along the line
    got = estimate_normals(np.concatenate([line, [[0.0, 0.0, 3.0]]]), k=5)[:20].astype(np.float64)
    # the point at z = 3 moves the box centre above the line: every line point's normal faces up (towards it)
    np.testing.assert_allclose(got[:15], np.tile(up, (15, 1)), rtol=0, atol=1e-6)


def test_repeated_points_in_a_cloud_give_no_nan():
    coord, _ = _box_room(np.random.default_rng(10), n_per_face=50)
    repeated = np.repeat(coord, 40, axis=0)  # more copies of each point than k
    got = estimate_normals(repeated)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(np.linalg.norm(got.astype(np.float64), axis=1), 1.0, rtol=0, atol=1e-6)


def test_an_empty_cloud_gives_no_normal():
    assert estimate_normals(np.empty((0, 3))).shape == (0, 3)


@pytest.mark.parametrize("coord, k, message", [
    (np.zeros((4, 2)), K_NORMAL, r"expected coord of shape \(N, 3\), got \(4, 2\)"),
    (np.array([[0.0, 0.0, np.nan]]), K_NORMAL, "expected finite coordinates"),
    (np.zeros((4, 3)), 0, "expected k an integer >= 1, got 0"),
])
def test_bad_input_is_a_clear_error(coord, k, message):
    with pytest.raises(ValueError, match=message):
        estimate_normals(coord, k)


def test_the_order_of_the_points_does_not_matter():
    coord, _ = _box_room(np.random.default_rng(11), n_per_face=500)
    order = np.random.default_rng(12).permutation(len(coord))
    np.testing.assert_allclose(estimate_normals(coord[order]), estimate_normals(coord)[order], rtol=0, atol=1e-6)


def test_the_same_bytes_at_one_and_two_threads(tmp_path):
    """pykdtree searches with OpenMP threads: the normals must not depend on how many."""
    import os
    import subprocess
    import sys

    coord, _ = _box_room(np.random.default_rng(13), n_per_face=2000)
    np.save(tmp_path / "coord.npy", coord)
    script = ("import sys, numpy as np; from pointgeope.data.normals import estimate_normals; "
              "np.save(sys.argv[2], estimate_normals(np.load(sys.argv[1])))")
    for threads in ("1", "2"):
        env = {**os.environ, "OMP_NUM_THREADS": threads}
        subprocess.run([sys.executable, "-c", script, str(tmp_path / "coord.npy"), str(tmp_path / f"{threads}.npy")],
                       env=env, check=True)
    assert np.load(tmp_path / "1.npy").tobytes() == np.load(tmp_path / "2.npy").tobytes()


def test_the_search_order_is_the_morton_order_of_a_fine_grid_over_the_box():
    """The neighbour search runs in the Morton order of a 2^21 grid over the cloud's box (the package's one
    Morton code, ``pointgeope.morton_code.code``): here against the bits interleaved one by one."""
    rng = np.random.default_rng(21)
    local = rng.random((400, 3)) * [6.0, 4.0, 3.0] - [3.0, 2.0, 1.5]
    extent = np.array([6.0, 4.0, 3.0])
    scale = ((1 << 21) - 1) / 6.0
    cells = np.clip(np.floor(local * scale + (1 << 20)), 0, (1 << 21) - 1).astype(np.int64)
    keys = [sum(((int(c[a]) >> bit) & 1) << (3 * bit + a) for bit in range(21) for a in range(3)) for c in cells]
    assert normals_module._morton_order(local, extent).tolist() == sorted(range(len(local)), key=keys.__getitem__)


def test_shuffled_rows_give_the_same_bytes_where_neighbours_are_equally_near():
    """On a centimetre grid many neighbours are equally near, and which of them the search returns follows the
    search order: an order of the coordinates alone (a fine grid: 2^21 cells a side, even with a far point
    stretching the box) keeps the normals the same bytes whatever the rows' order. A coarse grid (2^10 cells
    a side: 10 cm here) would keep the patch's rows in their given order and change some normals."""
    rng = np.random.default_rng(5)
    xy = rng.integers(0, 60, (4000, 2)) * 0.01   # a 60 cm floor patch on a cm grid, heights at mm
    coord = np.concatenate([np.c_[xy, rng.integers(0, 3, 4000) * 0.001], [[100.0, 100.0, 3.0]]])
    order = rng.permutation(len(coord))
    assert np.array_equal(estimate_normals(coord[order]), estimate_normals(coord)[order])
