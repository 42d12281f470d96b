"""The numba kd-tree kNN (pointgeope/model/ops/kd_knn.py, ``knn`` backend ``"numba"``, the CPU default): the
definition's neighbours bit for bit -- float32 ``((dx^2 + dy^2) + dz^2)``, ties to the smaller row, at the k-th
boundary too -- against the numpy brute force written from the definition (``knn_reference``), on lattices (exact
ties), duplicates, clouds smaller than ``k``, sizes around the leaves' and several clouds in one batch."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pointgeope.model.ops import backends, knn
from tests.model.knn_reference import assert_exact_knn

pytestmark = pytest.mark.skipif(not backends.available("numba"), reason="numba is not installed")


def _lattice(n: int, rng: np.random.Generator, side: int = 7, dtype=torch.float32) -> torch.Tensor:
    """``n`` points of a 4 cm lattice drawn with repeats: exact ties and duplicates, at the k-th distance too."""
    return torch.from_numpy(rng.integers(0, side, size=(n, 3)) * 0.04).to(dtype)


def _packed(*clouds: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.cat(clouds), torch.tensor([len(c) for c in clouds]).cumsum(0)


def _every_other(points: torch.Tensor, off: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    starts = [0, *off[:-1].tolist()]
    return _packed(*(points[a:b][::2] for a, b in zip(starts, off.tolist(), strict=True)))


@pytest.mark.parametrize("k", [1, 3, 8, 16])
def test_self_and_other_queries_get_the_definitions_neighbours_on_lattices_and_tiny_clouds(k):
    """Self-neighbourhoods (searched from each point's own leaf) and every other row as queries (from the root),
    clouds of 1, 2 and 5 points among them (``n < k``: the cyclic fill)."""
    rng = np.random.default_rng(k)
    points, off = _packed(_lattice(700, rng), _lattice(600, rng, side=12), _lattice(5, rng), _lattice(1, rng),
                          _lattice(2, rng))
    assert_exact_knn("numba", points, points, k, off, off)
    queries, q_off = _every_other(points, off)
    assert_exact_knn("numba", queries, points, k, q_off, off)


@pytest.mark.parametrize("sizes", [[17, 33, 63, 65, 129], [16, 15, 1, 257], [3]])
def test_odd_sizes_around_the_leaves_and_queries_off_the_cloud(sizes):
    """Clouds of a leaf and one point more or less (empty leaves at the end of the tree), random float32 points
    (distinct distances) with lattice points mixed in, and queries that are no point of the support."""
    rng = np.random.default_rng(len(sizes))
    clouds = [torch.cat([torch.from_numpy(rng.random((n - n // 2, 3))).float(), _lattice(n // 2, rng)])
              for n in sizes]
    points, off = _packed(*clouds)
    assert_exact_knn("numba", points, points, 8, off, off)
    queries, q_off = _packed(*(torch.from_numpy(rng.random((n + 3, 3)) * 0.3).float() for n in sizes))
    assert_exact_knn("numba", queries, points, 8, q_off, off)


@pytest.mark.parametrize("support", [2500, 150])
def test_many_queries_taken_in_morton_order_are_answered_in_the_callers_order(support):
    """3,001 queries off the support, on the half lattice of its points (from ``knn._ORDERED_QUERIES`` on they are
    searched in their Morton order), in blocks of 2 and of 16 (a leaf's worth: 20 queries a support point), the
    last one short."""
    rng = np.random.default_rng(11)
    points, off = _packed(_lattice(support, rng, side=15))
    queries, q_off = _packed(torch.from_numpy(rng.integers(0, 30, (3001, 3)) * 0.02).float())
    assert_exact_knn("numba", queries, points, 3, q_off, off)
    assert_exact_knn("numba", queries, points, 16, q_off, off)


def test_float64_coordinates_keep_the_rule_in_float64():
    rng = np.random.default_rng(3)
    points, off = _packed(_lattice(800, rng, dtype=torch.float64))
    assert_exact_knn("numba", points, points, 8, off, off)
    queries, q_off = _every_other(points, off)
    assert_exact_knn("numba", queries, points, 5, q_off, off)


def test_a_point_repeated_hundreds_of_times_gets_its_smallest_rows():
    """400 copies of one point among 300 others: each copy's 16 neighbours are the 16 smallest rows of the copies
    (every copy at ``d2 = 0``: the tree skips a box at the 16th distance only by its smallest row)."""
    rng = np.random.default_rng(5)
    points, off = _packed(torch.cat([_lattice(150, rng), torch.full((400, 3), 0.13), _lattice(150, rng)]))
    idx, dist2 = assert_exact_knn("numba", points, points, 16, off, off)
    assert torch.equal(idx[200], torch.arange(150, 166)) and not dist2[200].any()


def test_it_equals_the_torch_backend_and_is_the_cpu_default(monkeypatch):
    monkeypatch.delenv("POINTGEOPE_KERNELS", raising=False)          # the CPU keeps Triton off unless asked
    rng = np.random.default_rng(12)
    points, off = _packed(_lattice(900, rng, side=9), _lattice(40, rng, side=2))
    got = knn(points, points, 16, off, off, backend="numba")
    want = knn(points, points, 16, off, off, backend="torch")
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))
    assert backends.knn_backend(torch.device("cpu")) == "numba"


def test_fps_gives_the_same_samples_in_any_kd_order_it_is_given():
    """``bucket_fps`` with each cloud's rows in a given order (the kNN tree's kd order, in a hierarchy) samples
    what the torch backend does: the tree decides which distances to update, never the result; here random
    orders, lattices with duplicates, clouds of 1 and 70 points (one leaf and two)."""
    from pointgeope.model.ops import fps
    from pointgeope.model.ops.bucket_fps import bucket_fps

    rng = np.random.default_rng(13)
    points, off = _packed(_lattice(900, rng), _lattice(70, rng, side=3), _lattice(1, rng), _lattice(300, rng))
    sizes = torch.diff(off, prepend=torch.zeros(1, dtype=torch.long)).tolist()
    kept = [max(1, n // 4) for n in sizes]
    want, _ = fps(points, off, 4, backend="torch")
    orders = [rng.permutation(n) for n in sizes[:-1]] + [None]
    got = bucket_fps(points.numpy(), sizes, kept, orders=orders)
    np.testing.assert_array_equal(got, want.numpy())


def test_a_hierarchy_on_the_cpu_defaults_equals_the_torch_one_and_its_fps_takes_the_knn_trees_order(monkeypatch):
    """The loader's hierarchy (numba kNN and FPS, the FPS of each stage in the kd order of the tree the stage
    before built for its kNN) against pure torch (both ops the definition), bit for bit, on clouds full of ties."""
    import dataclasses

    from pointgeope.model.ops import HierarchySpec, OpsBackends, bucket_fps as bucket_module

    given, real = [], bucket_module.bucket_fps
    monkeypatch.setattr(bucket_module, "bucket_fps",
                        lambda *a, orders=None, **kw: given.append(orders) or real(*a, orders=orders, **kw))
    rng = np.random.default_rng(14)
    coord, offset = _packed(_lattice(1500, rng, side=10), _lattice(40, rng, side=3), _lattice(3, rng))
    spec = HierarchySpec((1, 4, 4, 2), (8, 16, 16, 16), OpsBackends("numba", "numba"))
    got = spec(coord, offset)
    want = dataclasses.replace(spec, backends=OpsBackends("torch", "torch"))(coord, offset)
    for f in dataclasses.fields(want):
        for g, w in zip(getattr(got, f.name), getattr(want, f.name), strict=True):
            assert (g is None and w is None) or torch.equal(g, w), f.name
    assert len(given) == 3 and all(o is not None for orders in given for o in orders)


def test_the_neighbours_of_support_rows_are_the_definitions_of_those_points():
    """``knn_of_rows`` (the transition down's search: queries that are support points, answered from their own
    leaves) against the reference of ``support[rows]``: rows taken twice, lattice ties, a cloud of 3 points
    (``n < k``) and one of 1, rows in any order."""
    from pointgeope.model.ops.knn_rows import knn_of_rows
    from tests.model.knn_reference import reference_knn

    rng = np.random.default_rng(15)
    points, off = _packed(_lattice(1200, rng, side=9), _lattice(3, rng), _lattice(1, rng), _lattice(400, rng))
    starts = [0, *off[:-1].tolist()]
    picked = [torch.from_numpy(rng.integers(a, b, max(1, (b - a) // 3))) for a, b in zip(starts, off.tolist(),
                                                                                      strict=True)]
    picked[0][:5] = picked[0][5]                                    # one row taken six times
    rows, rows_off = torch.cat(picked), torch.tensor([len(p) for p in picked]).cumsum(0)
    for backend in ("numba", "torch"):
        idx, dist2 = knn_of_rows(rows, points, 16, rows_off, off, backend=backend)
        want_idx, want_d2 = reference_knn(points[rows], points, 16, rows_off, off)
        np.testing.assert_array_equal(idx.numpy(), want_idx)
        np.testing.assert_array_equal(dist2.double().numpy(), want_d2)


@pytest.mark.parametrize(("k", "k_rows"), [(8, 16), (16, 8), (3, 3)])
def test_a_clouds_neighbourhoods_and_its_rows_wider_ones_in_one_search_are_both_the_definitions(k, k_rows):
    """``knn_with_rows`` (a stage's kNN and the next transition down in one pass of the tree) against the
    reference of every point's ``k`` and of ``support[rows]``'s ``k_rows``: lattice ties, a row taken three times,
    clouds of 3 and 1 points (``n`` below both counts: the cyclic fill) and one of 10 (between 8 and 16)."""
    from pointgeope.model.ops.knn_rows import knn_with_rows
    from tests.model.knn_reference import reference_knn

    rng = np.random.default_rng(k * 100 + k_rows)
    points, off = _packed(_lattice(900, rng, side=8), _lattice(3, rng), _lattice(1, rng), _lattice(10, rng),
                          _lattice(300, rng, side=40))
    starts = [0, *off[:-1].tolist()]
    picked = [torch.from_numpy(rng.choice(np.arange(a, b), max(1, (b - a) // 4), replace=False))
              for a, b in zip(starts, off.tolist(), strict=True)]
    picked[0][:3] = picked[0][3]
    rows, rows_off = torch.cat(picked), torch.tensor([len(p) for p in picked]).cumsum(0)
    (idx, dist2), (idx_rows, dist2_rows) = knn_with_rows(points, off, k, rows, rows_off, k_rows)
    for got, want in (((idx, dist2), reference_knn(points, points, k, off, off)),
                      ((idx_rows, dist2_rows), reference_knn(points[rows], points, k_rows, rows_off, off))):
        np.testing.assert_array_equal(got[0].numpy(), want[0])
        np.testing.assert_array_equal(got[1].double().numpy(), want[1])
