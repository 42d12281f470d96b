"""Tests of pointgeope/model/ops/checks.py and of the point ops' argument checks on every backend this machine
has (``triton`` in Triton's interpreter, conftest's ``interpreted``): non-finite coordinates (beyond
``COORD_LIMIT``: ``test_ops_coordinate_limit.py``), counts that are not ints, query and support of different
dtypes, integer and half coordinates on the torch kNN, meta tensors; and of the interpolation's weights in half
precision against an independent float64 inverse-distance reference."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from pointgeope.model.ops import (
    HierarchySpec,
    OpsBackends,
    backends,
    fps,
    interpolate,
    interpolate_from,
    knn,
)
from pointgeope.model.ops.checks import check_count, check_finite

KNN = [b for b in ("numba", "pykdtree", "scipy", "torch", "cluster", "triton") if backends.available(b)]
FPS = [b for b in ("numba", "torch", "triton") if backends.available(b)]
# (knn, fps) pairs of the hierarchy: the CPU defaults, the fallbacks, the CUDA default (interpreted here)
PAIRS = [p for p in (("numba", "numba"), ("pykdtree", "numba"), ("scipy", "torch"), ("torch", "torch"),
                     ("triton", "triton"))
         if all(backends.available(b) for b in p)]


def _cloud(n: int = 12, seed: int = 0, dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, 3, generator=g, dtype=torch.float64).to(dtype), torch.tensor([n])


def test_check_count_takes_ints_and_names_what_is_not_one():
    assert check_count("k", 3) == 3 and check_count("k", np.int64(4)) == 4 and check_count("k", torch.tensor(5)) == 5
    for value, kind in ((2.5, "float"), (2.0, "float"), ("3", "str")):
        with pytest.raises(TypeError, match=f"expected k an int >= 1, got .* \\({kind}\\)"):
            check_count("k", value)
    for value in (True, torch.tensor(2.0), torch.tensor([2])):
        with pytest.raises(TypeError, match="expected k an int >= 1"):
            check_count("k", value)
    with pytest.raises(ValueError, match="expected stride >= 1, got 0"):
        check_count("stride", 0)


def test_check_finite_counts_the_bad_entries_and_shows_the_first_bad_row():
    x = torch.zeros(6, 3)
    check_finite("coord", x)
    x[4, 1], x[2, 0], x[2, 2] = float("inf"), float("nan"), -float("inf")
    with pytest.raises(ValueError, match=r"expected finite coord, got 3 NaN or infinite entries \(the first in row 2: "
                                         r"\[nan, 0.0, -inf\]\)"):
        check_finite("coord", x)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
@pytest.mark.parametrize("backend", KNN)
def test_knn_refuses_non_finite_query_or_support_by_name(on, backend, bad):
    on(backend)
    pts, off = _cloud()
    broken = pts.clone()
    broken[3, 1] = bad
    with pytest.raises(ValueError, match=r"expected finite query, got 1 NaN or infinite entries \(the first in row 3"):
        knn(broken, broken, 4, off, off, backend=backend)
    with pytest.raises(ValueError, match=r"expected finite support, got 1 .* in row 3"):
        knn(pts, broken, 4, off, off, backend=backend)
    with pytest.raises(ValueError, match=r"expected finite query, got 1 .* in row 3"):
        knn(broken, pts, 4, off, off, backend=backend)


def test_knn_refuses_query_and_support_on_two_devices_by_name():
    """The CPU backends moved both to the CPU without a word, and a GPU kernel would read one of them from the
    wrong memory (a second device here: PyTorch's ``meta``, which holds no data)."""
    pts = torch.rand(5, 3)
    for query, support in ((pts, pts.to("meta")), (pts.to("meta"), pts)):
        with pytest.raises(ValueError, match=rf"^expected query and support on one device, got "
                                             rf"{query.device} and {support.device}$"):
            knn(query, support, 2, [5], [5])


@pytest.mark.parametrize("backend", FPS)
def test_fps_refuses_non_finite_points_by_name(on, backend):
    on(backend)
    pts, off = _cloud()
    pts[7, 2] = -float("inf")
    with pytest.raises(ValueError, match=r"expected finite points, got 1 NaN or infinite entries \(the first in row 7"):
        fps(pts, off, 2, backend=backend)


@pytest.mark.parametrize("knn_backend, fps_backend", PAIRS)
def test_interpolate_and_the_hierarchy_refuse_non_finite_coordinates_by_name(on, knn_backend, fps_backend):
    on(knn_backend, fps_backend)
    pts, off = _cloud(20)
    coarse, coarse_off = _cloud(6, seed=1)
    feat = torch.randn(6, 4)
    pts[11] = float("nan")
    with pytest.raises(ValueError, match=r"expected finite target_points, got 3 .* in row 11"):
        interpolate(coarse, pts, feat, coarse_off, off, backend=knn_backend)
    with pytest.raises(ValueError, match=r"expected finite source_points, got 3 .* in row 11"):
        interpolate(pts, coarse, torch.randn(20, 4), off, coarse_off, backend=knn_backend)
    spec = HierarchySpec((1, 2), (4, 4), OpsBackends(knn=knn_backend, fps=fps_backend))
    with pytest.raises(ValueError, match=r"expected finite coord, got 3 .* in row 11"):
        spec(pts, off)
    spec(pts[:11], torch.tensor([11]))                         # the rows before it are fine


def _distances(pts: torch.Tensor) -> torch.Tensor:
    """``(n, n)`` float64 squared distances between every two of the points (one cloud), unsorted."""
    p = pts.double()
    return ((p[:, None] - p[None]) ** 2).sum(-1)


@pytest.mark.parametrize("dtype", [torch.complex64, torch.bool])
def test_complex_and_bool_coordinates_are_refused_by_name_in_every_op(dtype):
    """Complex coordinates failed in ``torch.iinfo`` ("requires an integer input type"), naming nothing; bool ones
    (a mask passed for points) were searched as 0 and 1."""
    points = torch.randn(6, 3).to(dtype) if dtype.is_complex else torch.rand(6, 3) > 0.5
    calls = {"query": lambda: knn(points, points, 2, [6], [6]), "points": lambda: fps(points, [6], 2),
             "source_points": lambda: interpolate(points, points, torch.randn(6, 2), [6], [6]),
             "coord": lambda: HierarchySpec((1, 2), (2, 2))(points, [6])}
    for name, call in calls.items():
        with pytest.raises(TypeError, match=rf"expected {name} a floating-point or integer tensor, got dtype {dtype}"):
            call()


def test_interpolate_from_refuses_neighbours_and_distances_of_other_shapes():
    """``idx (1, 3)`` with ``dist2 (2, 3)`` broadcast into 2 rows of the first target's neighbours, silently."""
    feat, idx = torch.randn(5, 2), torch.tensor([[0, 1, 2]])
    with pytest.raises(ValueError, match=r"expected source_feat \(N_s, C\), idx \(N_t, k\) and dist2 of idx's "
                                         r"shape, got \(5, 2\), \(1, 3\) and \(2, 3\)"):
        interpolate_from(feat, idx, torch.rand(2, 3))
    with pytest.raises(ValueError, match=r"got \(5,\), \(1, 3\) and \(1, 3\)"):
        interpolate_from(feat[:, 0], idx, torch.rand(1, 3))


def test_the_torch_knn_searches_integer_and_half_coordinates_in_float32():
    """Integer coordinates raised torch's 'mean(): could not infer output dtype'; float16 coordinates a few
    thousand apart overflowed the float16 squared distances (65504) and gave every row wrong neighbours."""
    g = torch.Generator().manual_seed(6)
    for pts in ((torch.rand(30, 3, generator=g) * 10).long(), (torch.rand(30, 3, generator=g) * 3000).half()):
        off = torch.tensor([30])
        idx, dist2 = knn(pts, pts, 4, off, off, backend="torch")
        want = _distances(pts)
        assert dist2.dtype == torch.float32                          # the dtype searched, as documented
        assert torch.equal(want.gather(1, idx), want.sort(1).values[:, :4])   # the 4 nearest, in order
        torch.testing.assert_close(dist2.double(), want.gather(1, idx).float().double(), rtol=0, atol=0)


@pytest.mark.parametrize("backend", KNN)
def test_knn_refuses_a_k_that_is_not_an_int_by_name(on, backend):
    on(backend)
    pts, off = _cloud()
    for k in (2.5, 3.0):
        with pytest.raises(TypeError, match=f"expected k an int >= 1, got {k} \\(float\\)"):
            knn(pts, pts, k, off, off, backend=backend)
    with pytest.raises(ValueError, match="expected k >= 1, got 0"):
        knn(pts, pts, 0, off, off, backend=backend)
    idx, _ = knn(pts, pts, np.int64(3), off, off, backend=backend)    # an integer of another type is an int
    assert idx.shape == (12, 3)
    with pytest.raises(TypeError, match=r"expected neighbours\[0\] an int >= 1, got 4.0"):
        HierarchySpec((1,), (4.0,), OpsBackends(knn=backend))


@pytest.mark.parametrize("backend", FPS)
def test_fps_refuses_a_stride_that_is_not_an_int_by_name(on, backend):
    on(backend)
    pts, off = _cloud()
    for stride in (2.5, 4.0):
        with pytest.raises(TypeError, match=f"expected stride an int >= 1, got {stride} \\(float\\)"):
            fps(pts, off, stride, backend=backend)
    with pytest.raises(ValueError, match="expected stride >= 1, got 0"):
        fps(pts, off, 0, backend=backend)
    with pytest.raises(TypeError, match=r"expected strides\[1\] an int >= 1, got 2.5"):
        HierarchySpec((1, 2.5), (4, 4), OpsBackends(fps=backend))


def test_a_hierarchy_spec_needs_one_stride_and_one_k_a_stage():
    with pytest.raises(ValueError, match=r"one stride and one neighbour count a stage, got strides \(1, 4\) and "
                                         r"neighbours \(8,\)"):
        HierarchySpec((1, 4), (8,))
    with pytest.raises(ValueError, match=r"expected strides\[1\] >= 1, got 0"):
        HierarchySpec((1, 0), (8, 8))


@pytest.mark.parametrize("backend", KNN)
def test_knn_of_mixed_dtypes_is_the_search_in_the_promoted_dtype(on, backend):
    """float64 query, float32 support: the float64 search of both (float32 rounds the query on Triton,
    as it does for float64 alone); the distances come back in float64, the dtype searched, as documented."""
    on(backend)
    query, q_off = _cloud(40, seed=2, dtype=torch.float64)
    support, s_off = _cloud(30, seed=3)
    for q, s in ((query, support), (query.float(), support.double())):
        idx, dist2 = knn(q, s, 5, q_off, s_off, backend=backend)
        want_idx, want_d = knn(q.double(), s.double(), 5, q_off, s_off, backend=backend)
        assert dist2.dtype == torch.float64
        assert torch.equal(idx, want_idx)
        torch.testing.assert_close(dist2, want_d, rtol=0, atol=0)
    # and the float64 search is the brute-force one of the float64 values
    idx, dist2 = knn(query, support, 5, q_off, s_off, backend=backend)
    brute = ((query[:, None] - support.double()[None]) ** 2).sum(-1).sort(1).values[:, :5]
    torch.testing.assert_close(dist2, brute, rtol=1e-6 if backend == "triton" else 1e-12, atol=1e-7)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.int16, torch.uint8, torch.float16,
                                   torch.bfloat16, torch.float32, torch.float64])
@pytest.mark.parametrize("backend", KNN)
def test_knn_distances_are_float32_or_float64_and_equal_the_float64_brute_force(on, backend, dtype):
    """Integer coordinates gave integer squared distances that wrapped (int32 points 50 000 apart: -2^31) and
    float16 ones overflowed to inf past 256 apart: dist2 is float64 for float64 and float32 for the rest."""
    on(backend)
    if backend == "triton" and not dtype.is_floating_point:
        pytest.skip("the Triton kernel takes floating coordinates")
    far = {torch.int32: 50_000, torch.int64: 2 ** 40, torch.int16: 30_000, torch.uint8: 200,
           torch.float16: 60_000, torch.bfloat16: 2 ** 20, torch.float32: 2 ** 40, torch.float64: 2 ** 40}[dtype]
    pts = torch.tensor([[0, 0, 0], [far // 8, 0, 0], [far, 0, 0], [0, far, 0], [0, 0, far // 2]]).to(dtype)
    off = torch.tensor([5])
    idx, dist2 = knn(pts, pts, 5, off, off, backend=backend)
    assert dist2.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    want = _distances(pts)                                           # exact: integers below 2^53
    assert torch.equal(want.gather(1, idx), want.sort(1).values)
    torch.testing.assert_close(dist2.double(), want.sort(1).values, rtol=1e-6, atol=0)


@pytest.mark.parametrize("backend", [b for b in KNN if b != "triton"])
def test_interpolate_of_integer_coordinates_is_the_float64_reference(backend):
    """The wrapped int32 distances made the target 10 units from the source of feature 1 interpolate 2.5."""
    src = torch.tensor([[0, 0, 0], [100_000, 0, 0], [0, 100_000, 0]], dtype=torch.int32)
    dst = torch.tensor([[10, 0, 0], [70_000, 5, 0]], dtype=torch.int32)
    feat = torch.tensor([[1.0], [2.0], [3.0]])
    out = interpolate(src, dst, feat, torch.tensor([3]), torch.tensor([2]), backend=backend)
    torch.testing.assert_close(out.double(), _reference_interpolation(src, dst, feat), rtol=1e-6, atol=0)


def _reference_interpolation(src: torch.Tensor, dst: torch.Tensor, feat: torch.Tensor) -> torch.Tensor:
    """Inverse-distance weights of the 3 nearest from the definition, in float64, one target at a time."""
    src, dst, feat = src.double(), dst.double(), feat.double()
    out = torch.empty(dst.shape[0], feat.shape[1], dtype=torch.float64)
    for i in range(dst.shape[0]):
        d = ((dst[i] - src) ** 2).sum(1).sqrt()
        near = d.argsort()[:3]
        w = 1.0 / (d[near] + 1e-8)
        out[i] = (w[:, None] * feat[near]).sum(0) / w.sum()
    return out


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("backend", [b for b in KNN if b != "triton"])
def test_half_precision_interpolation_equals_the_float64_reference_where_targets_coincide_with_sources(backend, dtype):
    g = torch.Generator().manual_seed(4)
    src = (torch.rand(24, 3, generator=g) * 4).to(dtype)
    dst = torch.cat([src[::2], (torch.rand(20, 3, generator=g) * 4).to(dtype)])   # 12 targets on sources
    feat = torch.randn(24, 5, generator=g).to(dtype)
    out = interpolate(src, dst, feat, torch.tensor([24]), torch.tensor([32]), backend=backend)
    assert out.dtype == dtype and bool(out.isfinite().all())
    want = _reference_interpolation(src, dst, feat)
    tol = 1e-2 if dtype == torch.float16 else 4e-2                   # a few of the dtype's roundings
    torch.testing.assert_close(out.double(), want, rtol=tol, atol=tol)
    # a target on a source takes its feature: weight 1 - O(1e-8 / distance), as in float64
    torch.testing.assert_close(out[:12], feat[::2], rtol=0, atol=0)
    # equal features stay equal whatever the distances, with a zero among them
    ones = interpolate_from(torch.ones(3, 2, dtype=dtype), torch.tensor([[0, 1, 2]]),
                            torch.tensor([[0.0, 1.0, 1.0]], dtype=dtype))
    assert torch.equal(ones, torch.ones(1, 2, dtype=dtype))


def _network():
    from pointgeope.model.network import PointTransformerSeg

    torch.manual_seed(0)
    return PointTransformerSeg(in_channels=6, num_classes=5, planes=(8, 16), blocks=(1, 1), decoder_blocks=(1, 1),
                               strides=(1, 4), neighbours=(4, 4), share_planes=4).eval()


def test_a_float16_network_equals_its_float32_self_where_every_sampled_point_is_interpolated_onto_itself():
    """PTv1's transition up carries each sampled point's feature onto the same point of the finer stage: the
    float16 weights were ``inf / inf`` there (every row NaN but a few)."""
    model, g = _network(), torch.Generator().manual_seed(1)
    coord, feat, off = torch.rand(40, 3, generator=g), torch.rand(40, 6, generator=g), torch.tensor([40])
    with torch.no_grad():
        want = model(coord, feat, off)
        got = model.half()(coord.half(), feat.half(), off)
    assert got.dtype == torch.float16 and bool(got.isfinite().all())
    torch.testing.assert_close(got.float(), want, rtol=0, atol=2e-2)


def test_the_network_refuses_non_finite_coord_by_name_when_it_builds_its_hierarchy():
    coord = torch.rand(40, 3)
    coord[9, 0] = float("nan")
    with pytest.raises(ValueError, match=r"expected finite coord, got 1 NaN or infinite entries \(the first in row 9"):
        _network()(coord, torch.rand(40, 6), torch.tensor([40]))


def test_offsets_given_as_a_float_list_are_refused_not_truncated():
    from pointgeope.model.ops.offsets import check_offset, offset_tensor

    with pytest.raises(ValueError, match="expected integer query_offset"):
        check_offset([2.5, 10], 10, "query_offset")                 # a long copy would have read [2, 10]
    assert check_offset((4, 10), 10) == [4, 10] and check_offset(np.array([3, 10]), 10) == [3, 10]
    with pytest.raises(ValueError, match="expected offset a \\(B,\\) integer tensor or list of ints"):
        offset_tensor([[1], [2, 3]])


def test_bool_offsets_are_refused_not_read_as_a_count_of_one():
    """``torch.tensor([True])`` was the offsets of a one-point cloud: kNN and FPS ran on it; the network with a
    hierarchy given took it as ``tensor([1])``."""
    pts = torch.rand(1, 3)
    for call in (lambda o: knn(pts, pts, 2, o, o), lambda o: fps(pts, o, 1)):
        for bad in (torch.tensor([True]), [True]):
            with pytest.raises(ValueError, match=r"^expected integer (query_)?offset \(cumulative point counts\), "
                                                 r"got dtype torch.bool$"):
                call(bad)
    net, coord = _network(), torch.rand(24, 3)             # with a hierarchy given, the offsets' values are not read
    with pytest.raises(ValueError, match=r"^expected offset an integer tensor of shape \(B,\), got torch.bool \(1,\)$"):
        net(coord, torch.rand(24, 6), torch.tensor([True]), hierarchy=net.hierarchy_spec(coord, [24]))


def test_knn_fps_and_knn_graph_refuse_meta_tensors_by_name_and_geope_qk_runs_on_them():
    """A meta tensor has a shape and no values: the ops that pick points by their coordinates refuse it naming
    the argument (torch said "Tensor.item() cannot be called on meta tensors"); geope_qk, whose output shape
    the values do not change, gives its output shape (the finiteness check has nothing to read)."""
    from pointgeope.nn import geope_qk, knn_graph

    meta = torch.device("meta")
    pts, off = torch.rand(10, 3), torch.tensor([10])
    with pytest.raises(ValueError, match=r"^expected query, support, query_offset, support_offset with values, got "
                                         r"meta tensors \(a shape without data\): knn picks points"):
        knn(pts.to(meta), pts.to(meta), 4, off.to(meta), off.to(meta))
    with pytest.raises(ValueError, match=r"^expected query, support with values, got meta tensors .*: knn"):
        knn(pts.to(meta), pts.to(meta), 4, off, off, check_finite=False)       # refused without the value check
    with pytest.raises(ValueError, match=r"^expected offset with values, got a meta tensor .*: fps"):
        fps(pts, off.to(meta), 4)
    with pytest.raises(ValueError, match=r"^expected x with values, got a meta tensor .*: knn_graph"):
        knn_graph(pts.to(meta), 4)
    q, k, pos = torch.randn(2, 5, 6), torch.randn(2, 5, 6), torch.randn(5, 3)
    got = geope_qk(q.to(meta), k.to(meta), pos.to(meta))
    want = geope_qk(q, k, pos)
    assert [(g.device.type, g.shape, g.dtype) for g in got] == [("meta", w.shape, w.dtype) for w in want]


@pytest.mark.parametrize("flag", ["no", "false", [False], None, 0, torch.tensor(False)])
def test_every_check_finite_takes_a_bool_only(flag):
    """``check_finite="no"`` (or ``"false"``, ``[False]``) is truthy and turned the coordinate checks of ``knn``,
    ``knn_of_rows``, ``fps`` and the PTv3 rotary encodings on against the ask (``None``, ``0`` off by accident);
    each is now one ``TypeError`` naming it, as ``PointTransformerSeg``'s, and ``True`` / ``False`` still run."""
    from pointgeope.model.ops.knn_rows import knn_of_rows
    from pointgeope.model.qk_encodings import QK_ENCODINGS, qk_encoding

    pts, off = torch.rand(8, 3), torch.tensor([8])
    calls = [lambda f: knn(pts, pts, 2, off, off, "torch", check_finite=f),
             lambda f: knn_of_rows(torch.arange(0, 8, 2), pts, 2, torch.tensor([4]), off, "numba", check_finite=f),
             lambda f: fps(pts, off, 2, "torch", check_finite=f)]
    calls += [lambda f, n=name: qk_encoding(n, 48, check_finite=f) for name in QK_ENCODINGS]
    for call in calls:
        with pytest.raises(TypeError, match=r"^expected check_finite True or False, got .* \((str|list|NoneType|int|"
                                            r"Tensor)\)$"):
            call(flag)
        call(True), call(False)
