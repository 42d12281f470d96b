"""Tests of the point ops' coordinate bound (``pointgeope/model/ops/checks.py``'s ``COORD_LIMIT``, +-2^60) on
every backend this machine has: coordinates beyond it refused in one line by ``knn``, ``fps``, ``interpolate``
and the hierarchy, before any kernel runs (so none is turned off), and right answers at it against float64
brute force and the FPS rule."""
from __future__ import annotations

import math

import pytest
import torch

from pointgeope.geope_checks import coordinates_outside
from pointgeope.model.ops import HierarchySpec, OpsBackends, fps, interpolate, knn
from pointgeope.model.ops.checks import COORD_LIMIT, check_coordinates
from tests.model.fps_reference import reference_fps
from tests.model.test_ops_checks import FPS, KNN, PAIRS, _cloud, _distances

BEYOND = r"expected {} within \+-2\^60 \(about 1.15e18: float32 squared distances overflow beyond\), got {} entries " \
         r"outside \(the first in row {}: .*\); recentre or rescale the coordinates$"


def test_check_coordinates_takes_the_limit_and_refuses_the_next_value_in_one_line():
    assert COORD_LIMIT == 2 ** 60
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.int64):
        check_coordinates("points", torch.tensor([[COORD_LIMIT, -COORD_LIMIT, 0]], dtype=dtype))
    for dtype in (torch.float32, torch.float64):                     # one ulp past the limit
        above = torch.nextafter(torch.tensor(float(COORD_LIMIT), dtype=dtype), torch.tensor(float("inf"), dtype=dtype))
        x = torch.zeros(4, 3, dtype=dtype)
        x[2, 1], x[3, 0] = -above, above
        with pytest.raises(ValueError, match=BEYOND.format("points", 2, 2)):
            check_coordinates("points", x)
    for big in (COORD_LIMIT + 1, -2 ** 63):                          # int64: exact, and no abs() overflow
        with pytest.raises(ValueError, match=BEYOND.format("coord", 1, 1)):
            check_coordinates("coord", torch.tensor([[0, 0, 0], [0, big, 0]]))
    check_coordinates("coord", torch.full((2, 3), 2 ** 31 - 1, dtype=torch.int32))    # every int32 is in range
    x = torch.zeros(3, 3, dtype=torch.float16)
    x[1, 2] = float("inf")                                           # float16 is in range, but for inf
    with pytest.raises(ValueError, match=r"expected finite q, got 1 NaN or infinite entries \(the first in row 1"):
        check_coordinates("q", x)
    x = torch.zeros(3, 3)
    x[0, 0], x[2, 1] = 1e30, float("nan")                            # NaN is named before a large value
    with pytest.raises(ValueError, match=r"expected finite q, got 1 NaN or infinite entries \(the first in row 2"):
        check_coordinates("q", x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int64,
                                   torch.int32, torch.uint8])
def test_the_rule_as_a_mask_is_the_definition_in_exact_arithmetic_for_every_dtype(dtype):
    """``coordinates_outside`` (which the PTv3 inputs, its encodings and ``pointgeope.nn`` read with their own
    messages) marks exactly the entries that are NaN, infinite or beyond 2^60 as exact numbers: each value, as
    the dtype holds it, taken to a Python float / int and compared there (float16 rounds 2^60 to inf, so a
    comparison in its dtype alone would take inf)."""
    info = torch.finfo(dtype) if dtype.is_floating_point else torch.iinfo(dtype)
    wanted = [0, 1, -1, COORD_LIMIT, -COORD_LIMIT, COORD_LIMIT * 1.04, -(2.0 ** 61), 1e25, info.max, info.min]
    if dtype.is_floating_point:
        wanted += [float("nan"), float("inf"), -float("inf"), info.tiny]
    values = [v for v in wanted if dtype.is_floating_point or info.min <= v <= info.max]
    x = torch.tensor([float(v) if dtype.is_floating_point else int(v) for v in values]).to(dtype)
    held = x.tolist()                                                # the values as the dtype holds them
    expected = [not math.isfinite(v) or abs(v) > 2 ** 60 for v in held]
    assert coordinates_outside(x).tolist() == expected
    assert coordinates_outside(x.reshape(-1, 1).expand(-1, 3)).all(1).tolist() == expected   # elementwise


def _too_large(dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """The 12-point cloud with a finite point at +2e38 and one at -2e38: float32 squared distances overflow."""
    pts, off = _cloud(dtype=dtype)
    pts[5, 0], pts[6, 0] = 2e38, -2e38
    return pts, off


@pytest.mark.parametrize("backend", KNN)
def test_knn_refuses_coordinates_beyond_the_limit_on_every_backend(on, backend, kernel_failures_forgotten):
    """pykdtree answered row 2^32 - 1, torch neighbours that were not the point itself, Triton a crash."""
    on(backend)
    pts, off = _too_large()
    with pytest.raises(ValueError, match=BEYOND.format("query", 2, 5)):
        knn(pts, pts, 3, off, off, backend=backend)
    with pytest.raises(ValueError, match=BEYOND.format("support", 2, 5)):
        knn(_cloud()[0], pts, 3, off, off, backend=backend)
    far = _cloud(dtype=torch.float64)[0]
    far[1, 2] = 1e39                                                 # float64 beyond float32's range
    with pytest.raises(ValueError, match=BEYOND.format("query", 1, 1)):
        knn(far, far, 3, off, off, backend=backend)
    assert kernel_failures_forgotten.failures() == {}


@pytest.mark.parametrize("backend", FPS)
def test_fps_refuses_points_beyond_the_limit_on_every_backend(on, backend, kernel_failures_forgotten):
    """torch sampled one float64 point at 1e39 four times, Triton crashed in the Morton code."""
    on(backend)
    pts, off = _too_large(torch.float64)
    pts[6, 0] = 1e39
    with pytest.raises(ValueError, match=BEYOND.format("points", 2, 5)):
        fps(pts, off, 4, backend=backend)
    assert kernel_failures_forgotten.failures() == {}


@pytest.mark.parametrize("knn_backend, fps_backend", PAIRS)
def test_interpolate_and_the_hierarchy_refuse_coordinates_beyond_the_limit(on, knn_backend, fps_backend):
    on(knn_backend, fps_backend)
    pts, off = _too_large()
    coarse, coarse_off = _cloud(6, seed=1)
    with pytest.raises(ValueError, match=BEYOND.format("target_points", 2, 5)):
        interpolate(coarse, pts, torch.randn(6, 4), coarse_off, off, backend=knn_backend)
    with pytest.raises(ValueError, match=BEYOND.format("source_points", 2, 5)):
        interpolate(pts, coarse, torch.randn(12, 4), off, coarse_off, backend=knn_backend)
    with pytest.raises(ValueError, match=BEYOND.format("coord", 2, 5)):
        HierarchySpec((1, 2), (4, 4), OpsBackends(knn=knn_backend, fps=fps_backend))(pts, off)


def test_a_cloud_beyond_the_limit_turns_no_default_triton_kernel_off(interpreted_cpu):
    """The default path fell back on the crash: one 'failed on this device' warning, and every later FPS and
    kNN of the process ran on the host. Now the input is refused, and the next good cloud runs in Triton."""
    import importlib

    from pointgeope.model import kernels

    fps_module, knn_module = (importlib.import_module(f"pointgeope.model.ops.{m}") for m in ("fps", "knn"))
    pts, off = _too_large()
    for op in (lambda: fps(pts, off, 4), lambda: knn(pts, pts, 3, off, off),
               lambda: HierarchySpec((1, 2), (4, 4))(pts, off)):
        with pytest.raises(ValueError, match=BEYOND.format(".*", 2, 5)):
            op()
    assert kernels.failures() == {}
    for module in (fps_module, knn_module):
        module.KERNEL.ran.clear()
    good, _ = _cloud()
    assert fps(good, off, 4)[0].tolist() == reference_fps(good.numpy(), 3)
    knn(good, good, 3, off, off)
    assert fps_module.KERNEL.ran == knn_module.KERNEL.ran == {"triton"}


def _at_the_limit() -> torch.Tensor:
    """16 distinct points ``i * 2^57``, ``|i| <= 8``, corners ``+-2^60`` included: float32 differences and their
    squares and sums are exact (small integers times powers of two), so the float64 reference is the rule."""
    g = torch.Generator().manual_seed(5)
    grid = torch.randperm(17 ** 3, generator=g)[:14]
    steps = torch.stack([grid // 289, grid // 17 % 17, grid % 17], 1) - 8
    steps = torch.cat([torch.tensor([[8, 8, 8], [-8, -8, -8]]), steps])
    return (steps.double() * 2.0 ** 57).float()


@pytest.mark.parametrize("backend", KNN)
def test_knn_at_the_limit_is_the_float64_brute_force(on, backend):
    """The bound's claim: at |x| = 2^60 no backend overflows, the torch kNN's expansion included."""
    on(backend)
    pts, off = _at_the_limit(), torch.tensor([16])
    idx, dist2 = knn(pts, pts, 5, off, off, backend=backend)
    want = _distances(pts)
    assert torch.equal(idx[:, 0], torch.arange(16))                  # each point its own nearest (distinct)
    assert torch.equal(dist2.double(), want.sort(1).values[:, :5])   # ties free: the distances are the answer
    assert torch.equal(want.gather(1, idx), dist2.double())


@pytest.mark.parametrize("backend", FPS)
def test_fps_at_the_limit_is_the_rule(on, backend):
    on(backend)
    pts = _at_the_limit()
    idx, _ = fps(pts, torch.tensor([16]), 2, backend=backend)
    assert idx.tolist() == reference_fps(pts.numpy(), 8)
