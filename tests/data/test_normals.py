"""pointgeope/data/normals.py: the normals against their definition, on clouds whose normals are known.

The references here are written from the definition (the module docstring), independently of the module: the
distinct positions by ``np.unique``, the neighbours by a full distance sort, the plane by an SVD (not an
eigendecomposition), the orientation by the rule ``n . (v - p) >= 0`` with ``v`` the bounding box's centre, or
for a flat cloud a viewer above it.
"""
from __future__ import annotations

import numpy as np
import pytest

from pointgeope.data import normals as normals_module
from pointgeope.data.normals import DEGENERATE, FLAT, K_NORMAL, estimate_normals


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def _viewpoint(coord: np.ndarray) -> np.ndarray:
    """The box centre; for a flat cloud (the distinct positions' singular values ``s0 >= s1 >= s2`` with
    ``s2 <= FLAT s1``, ``s1^2 > DEGENERATE s0^2``) the centre plus the box's largest side along the normal of
    the cloud's plane, on its +z side (the test clouds' planes are not vertical, and each is one sheet: a flat
    cloud on two sheets, a storey, is checked by its floor and ceiling in its own test)."""
    lo, hi = coord.min(axis=0), coord.max(axis=0)
    positions = np.unique(coord, axis=0)
    if len(positions) >= 3:
        _, s, vt = np.linalg.svd(positions - positions.mean(axis=0))
        if s[1] ** 2 > DEGENERATE * s[0] ** 2 and s[2] <= FLAT * s[1]:
            return (lo + hi) / 2 + (hi - lo).max() * vt[2] * np.sign(vt[2][2])
    return (lo + hi) / 2


def _reference(coord: np.ndarray, k: int) -> np.ndarray:
    """The definition, point by point: the k nearest distinct positions by a full sort, the smallest right
    singular vector of the centred neighbours, oriented towards the viewpoint."""
    coord = np.asarray(coord, dtype=np.float64)
    view = _viewpoint(coord)
    positions = np.unique(coord, axis=0)
    out = np.empty_like(coord)
    for i, p in enumerate(coord):
        nearest = positions[np.argsort(np.linalg.norm(positions - p, axis=1), kind="stable")[:k]]
        _, _, vt = np.linalg.svd(nearest - nearest.mean(axis=0))
        n = vt[-1]
        out[i] = n if n @ (view - p) >= 0 else -n
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


def test_repeated_positions_match_a_brute_force_pca_of_the_distinct_positions():
    """A cloud whose positions repeat 1 to 40 times (a resampled object's): each point gets the plane of the ``k``
    nearest distinct positions, also where its own position is held ``k`` times or more (an estimate of the
    points' neighbours saw one point there and gave +-z)."""
    rng = np.random.default_rng(14)
    positions = rng.random((60, 3)) * [3.0, 2.0, 0.5]
    coord = np.repeat(positions, rng.integers(1, 41, len(positions)), axis=0)
    coord = coord[rng.permutation(len(coord))]
    for k in (3, 7, K_NORMAL):
        got = estimate_normals(coord, k=k).astype(np.float64)
        np.testing.assert_allclose(got, _reference(coord, k), rtol=0, atol=2e-6, err_msg=f"k={k}")


def test_a_repeated_point_gets_the_normal_of_its_position_alone():
    """Repeating the points of a cloud, each its own number of times, repeats their normals, byte for byte."""
    rng = np.random.default_rng(15)
    coord, _ = _box_room(rng, n_per_face=300)
    repeats = rng.integers(1, 2 * K_NORMAL, len(coord))
    got = estimate_normals(np.repeat(coord, repeats, axis=0))
    assert got.tobytes() == np.repeat(estimate_normals(coord), repeats, axis=0).tobytes()


def _patch(rng, normal, n: int = 4000, noise: float = 0.003, size=(4.0, 3.0)) -> np.ndarray:
    """``n`` points of a ``size`` rectangle at right angles to ``normal``, ``noise`` (m) across it."""
    normal = _unit(np.asarray(normal, dtype=np.float64))
    u = _unit(np.cross(normal, [1.0, 0.0, 0.0] if abs(normal[0]) < 0.9 else [0.0, 1.0, 0.0]))
    ab = rng.random((n, 2)) * size
    return ab[:, :1] * u + ab[:, 1:] * np.cross(normal, u) + rng.normal(0, noise, (n, 1)) * normal + [3.0, -1.0, 0.7]


@pytest.mark.parametrize("normal, noise", [([0, 0, 1], 0.001), ([0, 0, 1], 0.005), ([0.3, -0.2, 1.0], 0.003),
                                           ([1.0, 0.5, 0.2], 0.002)])
def test_a_flat_patch_alone_faces_one_side_the_plane_s_up_side(normal, noise):
    """A floor patch scanned alone has its box centre on its surface: the normals face a viewer above it, all on
    the side of the plane's +z, rather than flipping with the noise (about half of them did)."""
    coord = _patch(np.random.default_rng(16), normal, noise=noise)
    got = estimate_normals(coord).astype(np.float64)
    assert (got @ _unit(np.asarray(normal, dtype=np.float64)) > 0.9).all()


def test_a_flat_cloud_matches_the_brute_force_with_its_viewpoint():
    coord = _patch(np.random.default_rng(17), [0.2, 0.1, 1.0], n=300, noise=0.01, size=(2.0, 1.0))
    got = estimate_normals(coord, k=12).astype(np.float64)
    np.testing.assert_allclose(got, _reference(coord, 12), rtol=0, atol=2e-6)


def test_a_vertical_wall_alone_faces_its_largest_component_positive():
    """A wall scanned alone (its plane exactly vertical, ``m_z = 0``): every normal +x, not some -x."""
    rng = np.random.default_rng(18)
    coord = np.c_[np.full(500, 2.0), rng.random((500, 2)) * [3.0, 2.5]]
    np.testing.assert_array_equal(estimate_normals(coord), np.tile(np.float32([1, 0, 0]), (500, 1)))


@pytest.mark.parametrize("direction", [[1.0, 1.0, 1.0], [3.0, 1.0, 0.5], [0.0, 0.0, 1.0], [1.0, -2.0, 0.0]])
def test_a_line_alone_gets_one_normal_the_one_closest_to_up(direction):
    """A cloud on one line (made by a program) has its box centre on it: every point gets the direction at
    right angles to the line closest to +z (+x for a vertical line), rather than one sign or the other by
    rounding (about a third of a random line's normals were the opposite)."""
    d = _unit(np.asarray(direction))
    expected = np.array([1.0, 0.0, 0.0]) if d[2] == 1.0 else _unit(np.array([0.0, 0.0, 1.0]) - d[2] * d)
    coord = np.random.default_rng(20).random((1000, 1)) * 4.0 * d + [1.0, 2.0, 3.0]
    got = estimate_normals(coord).astype(np.float64)
    np.testing.assert_allclose(got, np.tile(expected, (1000, 1)), rtol=0, atol=1e-5)


def test_what_stands_on_a_flat_patch_faces_the_box_centre():
    """A post standing on a floor patch (the cloud flat still): the floor faces up, the post's side at right
    angles to it faces the box centre, as in a room."""
    rng = np.random.default_rng(19)
    floor = np.c_[rng.random((20000, 2)) * 6.0 - 3.0, np.zeros(20000)]
    post = np.c_[np.full(400, 1.0), rng.random((400, 2)) * [0.4, 0.3] + [-0.2, 0.0]]  # the face x = 1, 30 cm high
    got = estimate_normals(np.concatenate([floor, post])).astype(np.float64)
    assert (got[:20000][np.abs(floor[:, 0] - 1.0) > 0.3] @ [0.0, 0.0, 1.0] > 0.99).all()
    side = got[20000:][post[:, 2] > 0.1]   # away from the floor: the post's own plane, x = 1, facing -x (centre)
    assert (side @ [-1.0, 0.0, 0.0] > 0.99).all()


def _storey(rng, size=(6.0, 6.0, 0.3), per_m2: int = 1500, noise: float = 0.001) -> tuple[np.ndarray, np.ndarray]:
    """A storey wider than high (its floor, ceiling and four outer walls: the standard deviation of its points
    along z about 0.09 times that along y, flat by the ``FLAT`` ratio), ``per_m2`` points a square metre, and
    ``(N,)`` the face of each point: 0 the floor, 1 the ceiling, 2 a wall."""
    w, d, h = size
    parts, faces = [], []
    for z, face in ((0.0, 0), (h, 1)):
        n = int(w * d * per_m2)
        parts.append(np.c_[rng.random((n, 2)) * [w, d], np.full(n, z) + rng.normal(0, noise, n)])
        faces.append(np.full(n, face))
    for axis, length in ((0, d), (1, w)):
        for side in (0.0, (w, d)[axis]):
            n = int(length * h * per_m2)
            p = np.c_[rng.random(n) * length, rng.random(n) * h]
            parts.append(np.insert(p, axis, side + rng.normal(0, noise, n), axis=1))
            faces.append(np.full(n, 2))
    return np.concatenate(parts), np.concatenate(faces)


def test_a_storey_wider_than_flat_keeps_its_floor_up_and_its_ceiling_down():
    """A whole storey given to predict (here 6 x 6 m and 30 cm high; a real one 50 x 50 m and 3 m high) is flat by
    its spread, but its floor and ceiling are two sheets far apart with the box centre between them: the room's
    rule, the floor up and the ceiling down (a viewer above it turned every ceiling normal up)."""
    coord, face = _storey(np.random.default_rng(21))
    _, s, _ = np.linalg.svd(coord - coord.mean(axis=0), full_matrices=False)
    assert s[2] <= FLAT * s[1]   # flat by the ratio alone
    got = estimate_normals(coord).astype(np.float64)
    inside = (np.abs(coord[:, :2] - 3.0) < 2.7).all(axis=1)   # 30 cm from the walls: neighbours on one face
    assert (got[inside & (face == 0)] @ [0.0, 0.0, 1.0] > 0.99).all()
    assert (got[inside & (face == 1)] @ [0.0, 0.0, -1.0] > 0.99).all()


def test_a_floor_scanned_twice_a_few_millimetres_apart_is_one_sheet():
    """Two scans of one floor patch, registered 5 mm apart (well within a neighbourhood): one surface, all its
    normals up, not the upper scan's down."""
    rng = np.random.default_rng(22)
    first, second = (_patch(rng, [0, 0, 1], noise=0.0005) for _ in range(2))
    coord = np.concatenate([first, second + [0.0, 0.0, 0.005]])
    assert (estimate_normals(coord).astype(np.float64) @ [0.0, 0.0, 1.0] > 0.9).all()


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


def _repeated_room(seed: int) -> np.ndarray:
    """A box room around 0 (the corners (+-4, +-3, +-2) make the box centre exactly 0), its points repeated 1 to
    49 times, and one position given as ``0.0`` and as ``-0.0``."""
    rng = np.random.default_rng(seed)
    coord, _ = _box_room(rng, n_per_face=300)
    coord = np.repeat(coord - [3.0, 2.0, 1.5], rng.integers(1, 50, len(coord)), axis=0)
    return np.concatenate([coord, [[-4.0, -3.0, -2.0], [4.0, 3.0, 2.0], [0.0, 2.0, 0.5], [-0.0, 2.0, 0.5]]])


def test_the_order_of_the_points_does_not_matter():
    """Rows in any order give the same bytes, positions repeated or not (and -0.0 is 0.0)."""
    coord = _repeated_room(11)
    got = estimate_normals(coord)
    assert got[-1].tobytes() == got[-2].tobytes()
    for seed in (12, 13):
        order = np.random.default_rng(seed).permutation(len(coord))
        assert estimate_normals(coord[order]).tobytes() == got[order].tobytes()


def test_the_same_bytes_at_one_and_two_threads(tmp_path):
    """pykdtree searches with OpenMP threads: the normals must not depend on how many."""
    import os
    import subprocess
    import sys

    coord, _ = _box_room(np.random.default_rng(13), n_per_face=2000)
    flat = _patch(np.random.default_rng(14), [0.1, 0.2, 1.0], n=20000)   # a flat cloud: its plane summed too
    np.savez(tmp_path / "coord.npz", room=np.concatenate([coord, _repeated_room(15)]), flat=flat)
    script = ("import sys, numpy as np; from pointgeope.data.normals import estimate_normals; "
              "z = np.load(sys.argv[1]); "
              "np.save(sys.argv[2], np.concatenate([estimate_normals(z['room']), estimate_normals(z['flat'])]))")
    for threads in ("1", "2"):
        env = {**os.environ, "OMP_NUM_THREADS": threads}
        subprocess.run([sys.executable, "-c", script, str(tmp_path / "coord.npz"), str(tmp_path / f"{threads}.npy")],
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
    search order: an order of the coordinates alone (the Morton cells of a 2^21 grid, even with a far point
    stretching the box, and the points of one cell by their coordinates) keeps the normals the same bytes
    whatever the rows' order; a coarse grid (2^10 cells a side: 10 cm here) whose cells kept their rows as
    given would change some normals."""
    rng = np.random.default_rng(5)
    xy = rng.integers(0, 60, (4000, 2)) * 0.01   # a 60 cm floor patch on a cm grid, heights at mm
    coord = np.concatenate([np.c_[xy, rng.integers(0, 3, 4000) * 0.001], [[100.0, 100.0, 3.0]]])
    order = rng.permutation(len(coord))
    assert np.array_equal(estimate_normals(coord[order]), estimate_normals(coord)[order])
