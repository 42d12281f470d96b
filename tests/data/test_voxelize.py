"""Grid sampling and crop against brute-force Python references."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import pointgeope.data.voxelize as voxelize
from pointgeope.data.voxelize import (
    crop_nearest,
    grid_coord,
    grid_groups,
    random_crop,
    voxel_groups,
    voxel_keys,
    voxel_sample,
)


def reference_voxels(coord: np.ndarray, grid_size: float) -> dict[tuple[int, int, int], list[int]]:
    """Voxel -> point indices, one point at a time in float32 as the docstring states."""
    lo = [min(float(c[j]) for c in coord) for j in range(3)]
    voxels: dict[tuple[int, int, int], list[int]] = {}
    gs = np.float32(grid_size)
    for i, c in enumerate(coord):
        key = tuple(int(np.floor((c[j] - np.float32(lo[j])) / gs)) for j in range(3))
        voxels.setdefault(key, []).append(i)
    return voxels


def cloud(n: int, seed: int, extent=(2.0, 1.5, 1.0)) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.random((n, 3)) * np.array(extent) - 3.0).astype(np.float32)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_voxel_sample_keeps_one_point_per_occupied_voxel(seed):
    coord = cloud(3000, seed)
    voxels = reference_voxels(coord, 0.1)
    index_voxel = {i: key for key, members in voxels.items() for i in members}
    kept = voxel_sample(coord, 0.1, np.random.default_rng(seed))
    assert kept.dtype == np.int64
    assert len(kept) == len(voxels)
    assert {index_voxel[int(i)] for i in kept} == set(voxels)


def test_voxel_sample_picks_differently_with_different_seeds_and_uniformly():
    coord = cloud(2000, 3, extent=(0.3, 0.3, 0.3))   # ~27 voxels of ~70 points each
    voxels = reference_voxels(coord, 0.1)
    a = voxel_sample(coord, 0.1, np.random.default_rng(0))
    b = voxel_sample(coord, 0.1, np.random.default_rng(1))
    np.testing.assert_array_equal(a, voxel_sample(coord, 0.1, np.random.default_rng(0)))
    assert not np.array_equal(np.sort(a), np.sort(b))
    # Uniform within a voxel: over many draws every point of the biggest voxel gets picked.
    big = max(voxels.values(), key=len)
    rng = np.random.default_rng(5)
    picked = set()
    for _ in range(60 * len(big) // 10):
        picked |= set(voxel_sample(coord, 0.1, rng).tolist()) & set(big)
    assert picked == set(big)


def test_voxel_groups_match_reference_and_rank_orders_points_in_a_voxel():
    coord = cloud(1500, 4)
    rank = np.random.default_rng(0).permutation(len(coord))
    groups = voxel_groups(coord, 0.2, rank=rank)
    voxels = reference_voxels(coord, 0.2)
    got = [groups.order[s:s + c] for s, c in zip(groups.starts, groups.counts, strict=True)]
    assert sorted(map(tuple, (sorted(g) for g in got))) == sorted(tuple(sorted(m)) for m in voxels.values())
    for members in got:
        assert np.all(np.diff(rank[members]) > 0)
    np.testing.assert_array_equal(np.sort(groups.order), np.arange(len(coord)))


def test_keys_are_the_raveled_grid_and_fnv_fallback_groups_the_same():
    coord = cloud(800, 6)
    grid = grid_coord(coord, 0.1)
    key, exact = voxel_keys(grid)
    dims = grid.max(axis=1) + 1
    assert exact
    np.testing.assert_array_equal(key, np.ravel_multi_index(tuple(grid), tuple(dims)))
    # Far-apart points make prod(dims) overflow int64: the FNV hash still separates the voxels.
    far = np.concatenate([coord, np.array([[1e7, 1e7, 1e7]], dtype=np.float32)]).astype(np.float64)
    far_key, far_exact = voxel_keys(grid_coord(far, 1e-5))
    assert not far_exact
    groups = voxel_groups(far, 1e-5)
    assert groups.num_voxels == len(np.unique(far_key)) == len(far)


def test_grid_coord_of_a_fortran_order_cloud_leaves_it_unchanged():
    """Its (3, N) transpose is C-contiguous, so an in-place shift of 'a copy' changed the caller's points
    (predict gave a Fortran-order .npy scan other labels than the same points in C order)."""
    coord = cloud(300, 8).astype(np.float64)
    fortran = np.asfortranarray(coord)
    expected = np.floor((coord - coord.min(0)) / 0.1).astype(np.int64).T
    np.testing.assert_array_equal(grid_coord(fortran, 0.1), expected)
    np.testing.assert_array_equal(fortran, coord)


def test_grid_coord_rejects_bad_input():
    with pytest.raises(ValueError, match=r"expected coord of shape \(N, 3\), got \(4, 2\)"):
        grid_coord(np.zeros((4, 2), np.float32), 0.1)
    with pytest.raises(ValueError, match="grid_size a finite number > 0"):
        grid_coord(np.zeros((4, 3), np.float32), 0.0)



@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_point_is_refused_by_name_before_it_drops_an_axis(bad):
    """One NaN made its column's minimum NaN and every grid coordinate on that axis INT64_MIN: the 3-D grid
    collapsed to columns (19514 voxels became 5461 in a cloud of 20,000) without a word; an infinity broke its
    own point."""
    from pointgeope.data.fragments import voxel_fragments
    from pointgeope.data.ptv3_transforms import pointcept_grid

    c = cloud(2000, 0)
    c[123, 0] = bad
    want = rf"expected finite coord, got 1 NaN or infinite entries \(the first in row 123: \[{bad}, "
    for call in (lambda: grid_coord(c, 0.04), lambda: voxel_groups(c, 0.04),
                 lambda: voxel_sample(c, 0.04, np.random.default_rng(0)),
                 lambda: voxel_fragments(c, 0.04, np.random.default_rng(0)), lambda: pointcept_grid(c, 0.04),
                 lambda: random_crop(c, 100, np.random.default_rng(0))):
        with pytest.raises(ValueError, match=want):
            call()

@pytest.mark.parametrize("voxel_max", [1, 37, 499, 500, 800])
def test_crop_keeps_exactly_the_nearest_points(voxel_max):
    coord = cloud(500, 7)
    center = coord[123]
    got = crop_nearest(coord, voxel_max, center)
    dist = [((float(p[0]) - float(center[0])) ** 2 + (float(p[1]) - float(center[1])) ** 2
             + (float(p[2]) - float(center[2])) ** 2, i) for i, p in enumerate(coord)]
    expected = {i for _, i in sorted(dist)[:voxel_max]}
    assert set(got.tolist()) == expected
    assert len(got) == min(voxel_max, len(coord))


def test_random_crop_centres_on_a_point_and_is_seeded():
    coord = cloud(600, 8)
    a = random_crop(coord, 100, np.random.default_rng(3))
    np.testing.assert_array_equal(a, random_crop(coord, 100, np.random.default_rng(3)))
    center = coord[np.random.default_rng(3).integers(len(coord))]
    assert set(a.tolist()) == set(crop_nearest(coord, 100, center).tolist())
    np.testing.assert_array_equal(random_crop(coord, 600, np.random.default_rng(0)), np.arange(600))


def test_wide_grids_take_the_lexsort_path_with_the_same_groups():
    """Raveled keys too wide to pack with a 10-bit rank (prod(D) ~ 2^57 > 2^53) fall back to lexsort."""
    rng = np.random.default_rng(9)
    coord = rng.random((1000, 3)) * 50.0
    coord[500:] = coord[:500]                                   # 500 voxels of exactly 2 points
    key, exact = voxel_keys(grid_coord(coord, 1e-4))
    assert exact and key.max() >= 2 ** 53
    rank = rng.permutation(1000)
    groups = voxel_groups(coord, 1e-4, rank=rank)
    assert groups.num_voxels == 500 and (groups.counts == 2).all()
    for s in groups.starts:
        a, b = groups.order[s], groups.order[s + 1]
        assert a % 500 == b % 500 and rank[a] < rank[b]


@pytest.mark.parametrize("n", [1024, 1025])                     # ranks of 10 bits (0..1023), of 11 bits
@pytest.mark.parametrize("above", [-1, 0, 1])                   # top key 2^(63-b) - 1, 2^(63-b), 2^(64-b) - 1
@pytest.mark.parametrize("ranked", [False, True])
def test_grid_groups_pack_exactly_the_keys_that_fit_beside_the_rank(monkeypatch, n, above, ranked):
    """``[key | rank]`` packs into a non-negative int64 iff ``key.max() < 2^(63 - b)``, ``b`` the rank's
    bits (``ceil(log2 n)``): the top key just under the limit is packed, the limit itself and the top of
    the next band (where a ``64 - b`` budget would overflow the sign bit) take lexsort; the groups are a
    Python sort of ``(key, rank)`` either way. Keys are the raveled grid: one axis only, so key = z."""
    bits = (n - 1).bit_length()
    top = 2 ** (63 - bits) - 1 if above == -1 else 2 ** (63 - bits) if above == 0 else 2 ** (64 - bits) - 1
    rng = np.random.default_rng(bits + above)
    z = rng.integers(0, top, n // 2, dtype=np.int64)
    z = np.concatenate([z, z, np.full(n % 2, top, np.int64)])
    z[:2] = top                                                   # the top key, twice (also at index n//2)
    grid = np.stack([np.zeros(n, np.int64), np.zeros(n, np.int64), z])
    key, exact = voxel_keys(grid)
    assert exact and int(key.max()) == top
    rank = rng.permutation(n) if ranked else None
    packed, sort_nonnegative = [], voxelize.sort_nonnegative
    monkeypatch.setattr(voxelize, "sort_nonnegative", lambda a: packed.append(len(a)) or sort_nonnegative(a))
    groups = grid_groups(grid, rank)
    assert len(packed) == (above == -1)
    r = np.arange(n) if rank is None else rank
    order = sorted(range(n), key=lambda i: (int(z[i]), int(r[i])))
    runs = [len(list(g)) for _, g in itertools.groupby(order, key=lambda i: int(z[i]))]
    np.testing.assert_array_equal(groups.order, order)
    np.testing.assert_array_equal(groups.counts, runs)
    np.testing.assert_array_equal(groups.starts, np.cumsum([0] + runs[:-1]))


def test_random_crop_centres_on_every_point_alike():
    """The crop's centre is uniform over all N points (PTv1: ``coord[np.random.randint(N)]``): with
    ``voxel_max = 1`` the crop is its centre, so each of 4 points comes out about a quarter of the time."""
    coord = np.array([[0, 0, 0], [10, 0, 0], [0, 10, 0], [0, 0, 10]], dtype=np.float32)
    picks = [int(random_crop(coord, 1, np.random.default_rng(s))[0]) for s in range(400)]
    counts = np.bincount(picks, minlength=4)
    assert counts.sum() == 400 and counts.min() > 60, counts   # each ~100; P(< 60) for one point ~ 1e-6


def test_grid_cells_beyond_int64_are_refused_not_wrapped():
    """``floor(...)`` past 2^63 cast to INT64_MIN without a word: at ``grid_size=1e-30`` every point of a 2 m
    cloud had grid coordinates -2^63 and ``voxel_groups`` put them all in one voxel. Up to 2^62 cells they
    are exact; from 2^63 (or a float32 quotient that overflows to infinity) one line naming ``grid_size``."""
    from pointgeope.data.ptv3_transforms import pointcept_grid

    wide = np.array([[0.0, 0.0, 0.0], [2.0 ** 62, 1.0, 3.0]])
    np.testing.assert_array_equal(grid_coord(wide, 1.0), [[0, 2 ** 62], [0, 1], [0, 3]])
    np.testing.assert_array_equal(pointcept_grid(wide, 1.0), [[0, 2 ** 62], [0, 1], [0, 3]])
    want = r"^expected grid cells that fit in int64 \(below 2\^63\), got \S+ cells of grid_size (1e-30|1e-38|1) along"
    c = cloud(50, 3)
    for call in (lambda: grid_coord(c.astype(np.float64), 1e-30), lambda: grid_coord(c, 1e-38),
                 lambda: voxel_groups(c, 1e-30), lambda: pointcept_grid(c, 1e-30),
                 lambda: grid_coord(np.array([[0.0, 0, 0], [2.0 ** 63, 0, 0]]), 1.0)):
        with pytest.raises(ValueError, match=want):
            call()


def test_an_infinite_grid_size_is_refused_and_an_overflowing_quotient_refused_without_a_numpy_warning():
    """``grid_size=inf`` passed ``> 0`` and made every cell 0: the whole cloud one voxel without a word (on both
    grids). PTv3's grid also printed numpy's "overflow encountered in divide" before refusing a quotient past
    float64 (``1e10 / 1e-300``); PTv1's did not."""
    import warnings

    from pointgeope.data.ptv3_transforms import GridSample, pointcept_grid

    c = cloud(20, 1).astype(np.float64)
    for call in (lambda g: grid_coord(c, g), lambda g: pointcept_grid(c, g), lambda g: voxel_groups(c, g),
                 GridSample):
        for bad in (np.inf, 0.0, -1.0, np.nan):
            with pytest.raises(ValueError, match=r"^expected grid_size a finite number > 0, got (inf|0.0|-1.0|nan)$"):
                call(bad)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                # a numpy RuntimeWarning fails the test
        for call in (grid_coord, pointcept_grid):
            with pytest.raises(ValueError, match=r"^expected grid cells that fit in int64 \(below 2\^63\), got inf "):
                call(c * 1e10, 1e-300)
