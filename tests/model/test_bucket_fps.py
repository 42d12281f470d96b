"""Tests of pointgeope/model/ops/bucket_fps.py (the ``numba`` FPS backend, the CPU default) and of the rule of
``fps.py`` that every backend follows: each CPU backend against a numpy definition written from the rule,
on clouds full of exact ties (integer grids, duplicates, a line), clouds of 1-3 points and packed batches.
(The Triton kernel is checked against the same definition and the loader's hierarchy in test_triton_ops.py.)"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pointgeope.model.ops import fps
from pointgeope.model.ops.bucket_fps import bucket_fps
from tests.model.fps_reference import reference_fps

BACKENDS = ("numba", "torch")


def _clouds(rng: np.random.Generator) -> list[np.ndarray]:
    """Random (1,500 points: many leaves of the bucket tree), integer grid with repeats, all duplicates, an evenly
    spaced line, and 1, 2 and 3 points."""
    line = np.column_stack([np.arange(40.0), np.zeros(40), np.zeros(40)])
    return [rng.random((1500, 3)) * [4.0, 3.0, 2.5], rng.integers(0, 5, size=(250, 3)).astype(np.float64),
            np.full((7, 3), -1.5), line, rng.random((1, 3)), rng.random((2, 3)), rng.integers(0, 2, size=(3, 3)) * 1.0]


def _expected(clouds: list[np.ndarray], kept: list[int]) -> list[int]:
    """The per-cloud definitions, rows shifted by each cloud's start in the packed batch."""
    out, start = [], 0
    for cloud, m in zip(clouds, kept, strict=True):
        out += [start + j for j in reference_fps(cloud, m)]
        start += len(cloud)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("stride", [1, 3])
def test_each_backend_is_the_definition_on_ties_duplicates_and_tiny_clouds(backend, stride):
    """Stride 1 samples every point of a cloud (then repeats row 0 on duplicates); stride 3 a third."""
    clouds = _clouds(np.random.default_rng(0))
    points = torch.from_numpy(np.concatenate(clouds)).float()
    idx, new_off = fps(points, torch.tensor([len(c) for c in clouds]).cumsum(0), stride, backend=backend)
    kept = [max(1, len(c) // stride) for c in clouds]
    assert new_off.tolist() == np.cumsum(kept).tolist()
    assert idx.tolist() == _expected(clouds, kept)


def test_exact_ties_resolve_to_the_smallest_index():
    """Cases of the tie rule worked out by hand: on the line x = 0..39 the farthest from 0 is 39, then 19
    and 20 tie (both at 19^2 from their nearest sample), so 19; in the unit square 2 and 3 tie (1 from both
    samples), so 2; on duplicates every step ties at 0 and goes back to row 0."""
    line = np.column_stack([np.arange(40.0), np.zeros(40), np.zeros(40)]).astype(np.float32)
    assert bucket_fps(line, [40], [3], leaf=4).tolist() == [0, 39, 19]
    assert bucket_fps(np.full((7, 3), 2.0), [7], [4], leaf=2).tolist() == [0, 0, 0, 0]
    square = np.array([[0, 0, 0], [1, 1, 0], [1, 0, 0], [0, 1, 0]], dtype=np.float32)   # 1 and 2, 3 tie
    assert bucket_fps(square, [4], [4], leaf=1).tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("leaf", [1, 2, 3, 32, 64])
def test_the_bucket_tree_at_any_leaf_size_is_thereference_fps(leaf):
    """Leaves of 1-3 points give a deep tree over tiny clouds: the pruning and the merge of the maxima
    (ties across leaves and subtrees) run at every level."""
    clouds = _clouds(np.random.default_rng(1))
    kept = [max(1, len(c) // 2) for c in clouds]
    assert bucket_fps(np.concatenate(clouds), [len(c) for c in clouds], kept, leaf=leaf).tolist() == \
        _expected(clouds, kept)


@pytest.mark.parametrize("n", [1, 2, 1000, 1025])
def test_the_kd_order_is_a_permutation_split_at_each_nodes_share_along_its_widest_axis(n):
    """The leaves' order (``_kd_order``, 16-point leaves): every row once, duplicates and a last leaf part full
    included; at the root the first ``leaf * P / 2`` positions lie no higher, along the axis where the cloud
    spreads widest (x here), than the rest, and so do the first quarter's against the second's (y or x)."""
    from pointgeope.model.ops.bucket_fps import _kd_order

    rng = np.random.default_rng(n)
    points = (rng.integers(0, 9, size=(n, 3)) * [3.0, 2.0, 1.0]).astype(np.float32)   # repeats, x widest
    p = 1
    while p * 16 < n:
        p *= 2
    rows = _kd_order(points, 0, n, 16, p)
    assert sorted(rows.tolist()) == list(range(n))
    if n > 16:
        half = min(8 * p, n)
        assert points[rows[:half], 0].max() <= points[rows[half:], 0].min()
        quarter = points[rows[:half]]
        axis = int(np.argmax(quarter.max(0) - quarter.min(0)))
        assert quarter[:4 * p, axis].max() <= quarter[4 * p:, axis].min()


def _fused(cloud: np.ndarray, m: int) -> list[int]:
    """The same FPS with multiply-adds ``fma(dz, dz, fma(dy, dy, dx*dx))`` (float64 then float32: one
    rounding of each sum of a product), what a compiler allowed to contract would compute."""
    c = cloud.astype(np.float32)
    dist = np.full(len(c), np.inf, dtype=np.float32)
    chosen = [0]
    for _ in range(1, m):
        d = (c - c[chosen[-1]]).astype(np.float64)
        xy = (d[:, 1] * d[:, 1] + (d[:, 0] * d[:, 0]).astype(np.float32)).astype(np.float32)
        dist = np.minimum(dist, (d[:, 2] * d[:, 2] + xy).astype(np.float32))
        chosen.append(int(np.argmax(dist)))
    return chosen


@pytest.mark.parametrize("backend", BACKENDS)
def test_float64_input_is_rounded_to_float32_and_no_multiply_add_is_fused(backend):
    """Points on a sphere of radius 1000 around the first point: every distance of the first steps is 10^6
    up to its last bits, so the order depends on each rounding. The cloud tells the variants apart (the
    float64 FPS and the fused one differ from the definition); each backend gives the definition."""
    rng = np.random.default_rng(2)
    u = rng.normal(size=(400, 3))
    cloud = np.concatenate([np.zeros((1, 3)), 1000.0 * u / np.linalg.norm(u, axis=1, keepdims=True)])
    want = reference_fps(cloud, 80)
    assert _fused(cloud, 80) != want
    dist, f64 = np.full(len(cloud), np.inf), [0]
    for _ in range(1, 80):
        dist = np.minimum(dist, ((cloud - cloud[f64[-1]]) ** 2).sum(1))
        f64.append(int(np.argmax(dist)))
    assert f64 != want
    idx, _ = fps(torch.from_numpy(cloud), torch.tensor([401]), 5, backend=backend)
    assert idx.tolist() == want


def test_the_default_cpu_backend_is_the_bucket_fps_and_bad_input_is_refused():
    from pointgeope.model.ops import backends

    assert backends.fps_backend(torch.device("cpu")) == "numba"
    with pytest.raises(ValueError, match="expected finite points, got 1 NaN"):
        bucket_fps(np.array([[0.0, 0.0, np.nan], [1.0, 0.0, 0.0]]), [2], [2])
    with pytest.raises(ValueError, match="1 <= kept <= size"):
        bucket_fps(np.zeros((3, 3)), [3], [4])
