"""Tests of pointgeope/model/ops/triton_knn.py and triton_fps.py against independent exact references
(numpy brute force sorted by ``(dist2, row)``, a numpy FPS), the CPU backends and the torch FPS.

Without CUDA the kernels run on CPU tensors in Triton's interpreter (``tests/conftest.py`` sets
``TRITON_INTERPRET=1`` before Triton is imported); with CUDA they run compiled on the GPU."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

pytest.importorskip("triton")

from pointgeope.model import kernel_choice
from pointgeope.model.ops import HierarchySpec, OpsBackends, backends, fps, knn
from tests.model.fps_reference import reference_fps
from tests.model.knn_reference import assert_exact_knn

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu" and not kernel_choice.current().interpret:
    pytest.skip("no CUDA and TRITON_INTERPRET is not set: the Triton kernels cannot run", allow_module_level=True)


def _packed(clouds: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    points = torch.from_numpy(np.concatenate(clouds).astype(np.float32)).to(DEVICE)
    return points, torch.tensor([len(c) for c in clouds], device=DEVICE).cumsum(0)


def _random(n: int, rng: np.random.Generator) -> np.ndarray:
    return rng.random((n, 3)) * np.array([4.0, 3.0, 2.5])


def _grid(n: int, rng: np.random.Generator) -> np.ndarray:
    """Integer points in a 6^3 grid, with repeats: exact ties and duplicates everywhere."""
    return rng.integers(0, 6, size=(n, 3)).astype(np.float64)


def _assert_exact_knn(query, support, k, q_off, s_off):
    return assert_exact_knn("triton", query, support, k, q_off, s_off)


def test_knn_equals_the_exact_reference_on_ragged_batches_down_and_up():
    """Unequal clouds (1, 2, 3 points among them, so k > n), query != support in both directions."""
    rng = np.random.default_rng(0)
    fine = [_random(n, rng) for n in (300, 1, 3, 100, 2)]
    coarse = [_random(n, rng) for n in (75, 1, 2, 25, 1)]
    f, f_off = _packed(fine)
    c, c_off = _packed(coarse)
    _assert_exact_knn(c, f, 16, c_off, f_off)          # transition down: coarse queries, fine support
    _assert_exact_knn(f, c, 3, f_off, c_off)           # 3-NN up: fine queries, coarse support


def test_knn_breaks_exact_ties_and_duplicates_by_the_smaller_row():
    rng = np.random.default_rng(1)
    same = np.full((40, 3), 1.25)                      # one point 40 times: every distance ties
    far = np.concatenate([_random(50, rng), _random(50, rng) + 1000.0])     # two clusters far apart
    points, off = _packed([_grid(300, rng), same, far, _grid(3, rng)])    # (300: past the window, the scan)
    idx, dist2 = _assert_exact_knn(points, points, 8, off, off)
    assert torch.equal(idx[300:340].cpu(), torch.arange(300, 308).expand(40, 8))  # the 8 smallest rows, in order
    assert torch.all(dist2[:, 0] == 0)


def test_knn_is_deterministic_and_agrees_with_the_cpu_backends_without_ties():
    rng = np.random.default_rng(2)
    # two clouds: of 48 points (a second, masked tile of 32 queries and of 32 support points) and of 20 (> k)
    points, off = _packed([_random(48, rng), _random(20, rng)])
    a = knn(points, points, 16, off, off, backend="triton")
    b = knn(points, points, 16, off, off, backend="triton")
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    for name in [n for n in ("pykdtree", "scipy", "torch") if backends.available(n)]:
        assert torch.equal(knn(points.cpu(), points.cpu(), 16, off.cpu(), off.cpu(), backend=name)[0], a[0].cpu()), name


@pytest.mark.parametrize("super_blocks", [1, 3])
def test_knn_is_exact_with_small_blocks_where_the_box_scan_does_the_work(monkeypatch, super_blocks):
    """Blocks of 8 points in super-blocks of 1 or 3 and a window of one block, so that the clouds span many
    blocks and the two-level box scan (chunks, skips, merges after the window) does the work: the result is
    still the definition's."""
    from pointgeope.model.ops import triton_knn

    for name, value in dict(BLOCK_Q=16, BLOCK_S=8, WINDOW=1, CHUNK=4, SUPER=super_blocks).items():
        monkeypatch.setattr(triton_knn, name, value)
    rng = np.random.default_rng(7)
    fine, f_off = _packed([_random(64, rng), _grid(40, rng), _random(2, rng)])
    coarse, c_off = _packed([_random(16, rng), _grid(10, rng), _random(1, rng)])
    _assert_exact_knn(fine, fine, 8, f_off, f_off)
    _assert_exact_knn(coarse, fine, 16, c_off, f_off)
    # a tie on a box's boundary: x = 8 has rows 7 and 9 at distance 1; its window is the block 8..15,
    # and the block 0..7, whose box (and with super-blocks of 1, its super-box) is exactly at the k-th
    # distance, must still be visited
    line, off = _packed([np.column_stack([np.arange(32.0), np.zeros(32), np.zeros(32)])])
    query = torch.tensor([[8.0, 0.0, 0.0]], device=DEVICE)
    idx, _ = _assert_exact_knn(query, line, 2, torch.tensor([1], device=DEVICE), off)
    assert idx.tolist() == [[8, 7]]


def test_fps_equals_the_numpy_fps_and_the_torch_backend_with_ties_and_tiny_clouds():
    """The kernels (the default ``rounds`` one through ``fps``, and ``stream``), from the definition."""
    from pointgeope.model.ops.triton_fps import fps_triton

    rng = np.random.default_rng(3)
    same = np.full((9, 3), -2.0)                       # all duplicates: every step ties at distance 0
    clouds = [_random(140, rng), _grid(120, rng), np.array([[0.5, 0.5, 0.5]]), _random(2, rng), _random(3, rng), same]
    points, off = _packed(clouds)
    idx, new_off = fps(points, off, 4, backend="triton")
    idx = idx.cpu()
    assert new_off.tolist() == np.cumsum([35, 30, 1, 1, 1, 2]).tolist()
    start, lo = 0, 0
    for cloud, hi in zip(clouds, new_off.tolist(), strict=True):
        assert (idx[lo:hi] - start).tolist() == reference_fps(cloud.astype(np.float32), hi - lo)
        start, lo = start + len(cloud), hi
    assert idx[-2:].tolist() == [start - 9, start - 9]  # ties at 0 go to the smallest index: the first point
    assert torch.equal(idx, fps(points, off, 4, backend="torch")[0].cpu())
    assert torch.equal(idx, fps(points.cpu(), off.cpu(), 4, backend="numba")[0])   # the loader's FPS
    assert torch.equal(idx, fps(points, off, 4, backend="triton")[0].cpu())   # deterministic
    sizes, kept = [len(c) for c in clouds], [35, 30, 1, 1, 1, 2]
    assert torch.equal(idx, fps_triton(points, sizes, kept, method="stream").cpu())


@pytest.mark.parametrize("tuple_argmax", [False, True])
def test_every_fps_kernel_is_exact_with_many_small_blocks_chunks_and_rounds(monkeypatch, tuple_argmax):
    """Stream: chunks of 32 points
    (ties between chunks of the integer grid go to the earlier chunk); rounds: chunks of 2 blocks of 8,
    at most 4 samples a round, the updates 2 blocks and 2 samples at a time, with the argmax as the
    interpreter's two-step reduction and as the compiled kernel's tuple reduction."""
    from pointgeope.model.ops import triton_fps, triton_fps_rounds

    monkeypatch.setattr(triton_fps, "STREAM_BLOCK", 32)
    for name, value in dict(BLOCK_POINTS=8, CHUNK_BLOCKS=2, ROUND_SAMPLES=4, UPDATE_BLOCKS=2,
                            UPDATE_SAMPLES=2).items():
        monkeypatch.setattr(triton_fps_rounds, name, value)
    # the kernel's argmax follows the interpreter switch (the tuple reduction when compiled): both ways here
    seen = kernel_choice.current()
    monkeypatch.setattr(triton_fps_rounds, "current", lambda: dataclasses.replace(seen, interpret=not tuple_argmax))
    rng = np.random.default_rng(8)
    clouds = [_random(60, rng), _grid(80, rng)]
    points, _ = _packed(clouds)
    want = (reference_fps(clouds[0].astype(np.float32), 15)
            + [60 + j for j in reference_fps(clouds[1].astype(np.float32), 20)])
    for method in ("rounds",) + (() if tuple_argmax else ("stream",)):
        assert triton_fps.fps_triton(points, [60, 80], [15, 20], method=method).cpu().tolist() == want, method


def test_the_loaders_hierarchy_equals_the_triton_one():
    """What ``data.hierarchy: loader`` builds (the CPU defaults: the numba FPS, pykdtree) against what
    ``device`` builds on CUDA (the Triton kernels, here in the interpreter), on the same clouds: random,
    integer grids with repeats, a room rounded to the centimetre (as scans are stored: float32 distances tie where
    float64's differ), duplicates, 1-3 points: every sample, offset, neighbourhood (rows in their order) and 3-NN
    distance equal, bit for bit (ties to the smaller row on every backend)."""
    rng = np.random.default_rng(4)
    room = np.round(rng.random((100, 3)) * np.array([2.0, 1.5, 1.0]), 2)
    # (68 random and grid points: 17 at the second stage, more than its k, 5 at the last)
    clouds = [_random(68, rng), _grid(68, rng), room, np.full((9, 3), 0.5), _random(3, rng), _grid(2, rng),
              _random(1, rng)]
    coord, offset = _packed(clouds)
    strides, neighbours = (1, 4, 4), (8, 16, 16)
    got = HierarchySpec(strides, neighbours, OpsBackends(knn="triton", fps="triton"))(coord, offset).to("cpu")
    want = HierarchySpec(strides, neighbours)(coord.cpu(), offset.cpu())       # the loader's AttachHierarchy
    for name in ("samples", "offsets", "neighbours", "down", "up", "up_dist2"):
        for g, w in zip(getattr(got, name), getattr(want, name), strict=True):
            assert (g is None and w is None) or torch.equal(g, w), name
    assert (want.up_dist2[0][:, 1:] == want.up_dist2[0][:, :-1]).any()      # the grids do tie


def test_triton_on_cpu_tensors_without_the_interpreter_is_refused(monkeypatch):
    points, off = _packed([_random(10, np.random.default_rng(5))])
    points, off = points.cpu(), off.cpu()
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ValueError, match=r"runs on CUDA tensors .*TRITON_INTERPRET=1"):
        knn(points, points, 3, off, off, backend="triton")
    with pytest.raises(ValueError, match="fps backend 'triton' runs on CUDA tensors"):
        fps(points, off, 2, backend="triton")


def test_cuda_defaults_to_the_triton_kernels_and_info_names_them(capsys):
    from pointgeope.info import print_info

    cuda = torch.device("cuda")                        # a device name only: nothing runs on it
    assert backends.knn_backend(cuda) == backends.fps_backend(cuda) == "triton"
    assert backends.summary(cuda) == "cuda: knn=triton, fps=triton, interpolation=3-NN via knn=triton"
    print_info()
    assert "; cuda: knn=triton, fps=triton, interpolation=3-NN via knn=triton" in capsys.readouterr().out
    assert backends.knn_backend(torch.device("cpu")) != "triton"
    assert backends.fps_backend(torch.device("cpu")) != "triton"


def _exact_rows(query: torch.Tensor, support: torch.Tensor,
                k: int, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The definition for some query rows of one cloud, in eager torch (one rounding per operation): the
    k smallest keys ``bits(d2) << 32 | row``, sorted."""
    diff = query[rows, None, :] - support[None, :, :]
    d2 = (diff[..., 0] * diff[..., 0] + diff[..., 1] * diff[..., 1]) + diff[..., 2] * diff[..., 2]
    key = (d2.view(torch.int32).long() << 32) | torch.arange(support.shape[0], device=d2.device)
    key = key.sort(1).values[:, :k]
    return key & 0xFFFFFFFF, (key >> 32).int().view(torch.float32)


@pytest.mark.skipif(DEVICE != "cuda", reason="full-size clouds need the compiled kernels (the interpreter is too slow)")
def test_cuda_compiled_kernels_at_full_size_equal_the_definition():
    """One synthetic 40k-point cloud, as the network's first stages see it: FPS equal to the torch backend,
    kNN (k = 8 and 16, and 3-NN up) equal to the definition on 1,500 sampled query rows."""
    rng = np.random.default_rng(6)
    coord, offset = _packed([np.round(_random(40_000, rng) / 0.04) * 0.04 + rng.random((40_000, 3)) * 1e-3])
    sample, sub_off = fps(coord, offset, 4, backend="triton")
    assert torch.equal(sample, fps(coord, offset, 4, backend="torch")[0])
    sub = coord[sample]
    rows = torch.from_numpy(rng.choice(40_000, 1_500, replace=False)).to(DEVICE)
    for query, support, k, q_off, s_off in [(coord, coord, 8, offset, offset), (sub, coord, 16, sub_off, offset),
                                            (coord, sub, 3, offset, sub_off)]:
        idx, dist2 = knn(query, support, k, q_off, s_off, backend="triton")
        rows_q = rows[rows < query.shape[0]]
        want_idx, want_d = _exact_rows(query, support, k, rows_q)
        assert torch.equal(idx[rows_q], want_idx) and torch.equal(dist2[rows_q], want_d)


def test_the_triton_knn_takes_k_up_to_its_largest_and_the_default_hands_a_larger_k_on(monkeypatch):
    """``backends.TRITON_KNN_MAX_K`` (64, the compile check's largest kNN, no spill): Triton takes it; a larger k
    (whose compile took minutes at 256) goes to the next default backend (here the CPU's) with the same
    neighbours (clouds of 90 and 40 random points: no ties, the second filled cyclically), and an
    explicit ``backend="triton"`` refuses it in one line before any kernel."""
    import importlib

    from pointgeope.model.kernels import KernelArgumentError

    knn_module = importlib.import_module("pointgeope.model.ops.knn")      # the package exports the function
    top = backends.TRITON_KNN_MAX_K
    assert top == 64
    monkeypatch.setenv("POINTGEOPE_KERNELS", "triton")
    points, off = _packed([_random(90, np.random.default_rng(6)), _random(40, np.random.default_rng(7))])  # no ties
    launched = []
    real = knn_module.KERNEL.triton
    monkeypatch.setattr(knn_module.KERNEL, "triton", lambda *a: launched.append(a[2]) or real(*a))
    for k in (top, top + 1):
        idx, dist2 = knn(points, points, k, off, off)
        want_idx, want_dist2 = knn(points, points, k, off, off, backend="torch")
        assert torch.equal(idx, want_idx) and torch.equal(dist2, want_dist2)
    assert launched == [top] and backends.knn_backend(points.device, top + 1) != "triton"
    with pytest.raises(KernelArgumentError, match=f"knn backend 'triton' takes k <= {top} .*got k={top + 1}"):
        knn(points, points, top + 1, off, off, backend="triton")
    assert launched == [top]
