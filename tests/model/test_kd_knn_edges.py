"""The numba kd-tree kNN (``kd_knn``) at the edges of what the point ops take: coordinates at ``COORD_LIMIT``
(gaps of one float32 step, ``2^36`` there), squares that underflow to subnormals or zero, collinear and planar
clouds (boxes of zero width, exact ties on both sides of a query), each against the numpy brute force written from
the definition (``knn_reference``); and a loader's spawned worker builds the same hierarchy as the main process."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from pointgeope.model.ops import HierarchySpec, backends
from pointgeope.model.ops.checks import COORD_LIMIT
from pointgeope.model.ops.knn_rows import knn_of_rows
from tests.model.knn_reference import assert_exact_knn

pytestmark = pytest.mark.skipif(not backends.available("numba"), reason="numba is not installed")


def _huge(n: int, rng: np.random.Generator) -> np.ndarray:
    """Points a few float32 steps (``2^36``) apart at ``1.5 * 2^59``, some at ``+-COORD_LIMIT`` itself: exact ties."""
    p = 1.5 * 2.0**59 + rng.integers(-3, 4, size=(n, 3)) * 2.0**36
    p[rng.random((n, 3)) < 0.2] = COORD_LIMIT
    p[rng.random((n, 3)) < 0.1] = -COORD_LIMIT
    return p


def _tiny(n: int, rng: np.random.Generator) -> np.ndarray:
    """A lattice of step ``2^-75``: squares ``2^-150 i^2``, subnormal or rounded to zero in float32."""
    return rng.integers(-4, 5, size=(n, 3)) * 2.0**-75


def _collinear(n: int, rng: np.random.Generator) -> np.ndarray:
    """Points on a line (the x axis or a slanted one), a step of 0.1 with repeats."""
    t = rng.integers(0, n // 3 + 1, size=n) * 0.1
    direction = np.array([1.0, 0.0, 0.0]) if rng.random() < 0.5 else np.array([0.3, -1.7, 0.9])
    return t[:, None] * direction[None, :]


def _planar(n: int, rng: np.random.Generator) -> np.ndarray:
    p = np.round(rng.normal(size=(n, 3)), 1)
    p[:, 2] = 0.0
    return p


@pytest.mark.parametrize("make", [_huge, _tiny, _collinear, _planar])
@pytest.mark.parametrize("k", [1, 8, 20])
def test_edge_clouds_get_the_definitions_neighbours(make, k):
    """Self-neighbourhoods (own leaves), a copy of the cloud (searched from the root) and shifted queries, several
    clouds of 600, 40, 17 and 3 points in one batch (``n < k``: the cyclic fill)."""
    rng = np.random.default_rng(k)
    sizes = [600, 40, 17, 3]
    points = torch.from_numpy(np.concatenate([make(n, rng) for n in sizes])).float()
    off = torch.tensor(sizes).cumsum(0)
    assert_exact_knn("numba", points, points, k, off, off)
    assert_exact_knn("numba", points.clone(), points, k, off, off)
    picked = rng.random(len(points)) < 0.5
    picked[off - 1] = True                                       # one query at least in every cloud
    step = points.abs().amax() * 2.0**-23 if make is _huge else points.abs().amax() / 8
    queries = (points + step * torch.from_numpy(rng.integers(-1, 2, size=points.shape))).clamp(-COORD_LIMIT,
                                                                                                COORD_LIMIT)
    starts = [0, *off[:-1].tolist()]
    q_off = torch.tensor([int(picked[a:b].sum()) for a, b in zip(starts, off.tolist(), strict=True)]).cumsum(0)
    assert_exact_knn("numba", queries[torch.from_numpy(picked)].contiguous(), points, k, q_off, off)


class _Lattices(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.randint(0, 12, (1500, 3), generator=torch.Generator().manual_seed(i)) * 0.04


class _Build:
    """A collate function that builds the batch's hierarchy (the loader's ``AttachHierarchy``)."""

    def __init__(self):
        self.spec = HierarchySpec((1, 4, 4), (8, 16, 16))

    def __call__(self, items: list[torch.Tensor]):
        coord, off = torch.cat(items).float(), torch.tensor([len(x) for x in items]).cumsum(0)
        return backends.knn_backend(torch.device("cpu")), self.spec(coord, off)


def test_a_spawned_loader_worker_builds_the_main_process_hierarchy():
    """A worker started with ``spawn`` (a fresh interpreter: the numba functions loaded from the cache or compiled
    there) uses the numba kNN and gives the main process's hierarchy bit for bit (``fork``: tests/engine/
    test_build.py's workers)."""
    loader = DataLoader(_Lattices(), batch_size=2, num_workers=1, collate_fn=_Build(), multiprocessing_context="spawn")
    for j, (backend, got) in enumerate(loader):
        assert backend == "numba"
        _, want = _Build()([_Lattices()[2 * j], _Lattices()[2 * j + 1]])
        for field in ("offsets", "samples", "neighbours", "down", "up", "up_dist2"):
            for a, b in zip(getattr(got, field), getattr(want, field), strict=True):
                assert (a is None and b is None) or torch.equal(a, b), field


@pytest.mark.parametrize("rows, row", [([0, 1, 2], 2), ([0, 7, 6], 7)])
def test_a_row_outside_its_cloud_is_refused_not_answered_for_another_point(rows, row):
    """``knn_of_rows`` with the numba tree: row 2 given to the second cloud (rows 5 .. 9) would index that cloud
    from its end (point 7's neighbours, silently), row 7 given to the first (rows 0 .. 4) past it."""
    support, off = torch.arange(30.0).reshape(10, 3), torch.tensor([5, 10])
    expected = rf"rows of cloud \d \(rows_offset\) in its support rows \d \.\. \d, got row {row}$"
    with pytest.raises(ValueError, match=expected):
        knn_of_rows(torch.tensor(rows), support, 2, torch.tensor([2, 3]), off, backend="numba")
