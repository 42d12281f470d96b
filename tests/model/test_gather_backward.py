"""Tests of pointgeope/model/gather_backward.py (and its kernels, triton_gather.py) on CPU tensors under Triton's
interpreter: the kNN lists' transpose and the attention's backward summed by source point, against pair-by-pair
float64 sums written from the definition, on neighbour lists with ragged counts per source point, points that
are nobody's neighbour and repeated indices within a row; the same bits in every run."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")          # imported before TRITON_INTERPRET is set (test_fused_attention.py says why)
from pointgeope.model import fused_attention, gather_backward
from pointgeope.model.attention_reference import ref_aggregate, ref_frame, ref_relation
from tests.model.linear_gradcheck import LINEAR


@pytest.fixture(autouse=True)
def sorted_sums(interpreted):
    """Every test here under Triton's interpreter and the Triton path (conftest's ``interpreted``, which undoes
    this too) with the sums by source point (``SCATTER = "sorted"``; the default, ``"auto"``, takes them under
    deterministic algorithms only)."""
    interpreted.setattr(gather_backward, "SCATTER", "sorted")


# The kernels' tiles: the defaults (one chunk of 8 pairs holds most rows, 4 or 8 rows a program at 64 channels),
# and chunks of 2 pairs in tiles of 2 rows (many chunks a row, many programs: the loops and masks of the edges).
SMALL = {"block_t": 2, "budget": 2 * 2 * 64, "rows": 8, "warps": 4}


@pytest.fixture(params=["default", "small_tiles"])
def settings(request, monkeypatch):
    if request.param == "small_tiles":
        monkeypatch.setattr(gather_backward, "SETTINGS", {name: SMALL for name in gather_backward.SETTINGS})
    return request.param


def _lists(n=13, k=5, seed=0):
    """kNN-like lists ``(n, k)`` of rows below 9: row 0 in every list (a count above ``k``), row 3 twice in
    list 2, rows from 9 on in no list (nobody's neighbour)."""
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, 9, (n, k), generator=g)
    idx[:, 0] = 0
    idx[2, 1:3] = 3
    return idx


def test_the_transpose_lists_each_rows_pairs_in_order():
    idx = _lists()
    rows = 15                                                   # rows 9 .. 14: nobody's neighbour
    t = gather_backward.transpose(idx, rows)
    assert t.starts.shape == (rows + 1,) and t.starts[0] == 0 and t.starts[-1] == idx.numel()
    flat = idx.flatten().tolist()
    for p in range(rows):
        want = [pair for pair, row in enumerate(flat) if row == p]       # increasing pair numbers i k + j
        assert t.order[t.starts[p]:t.starts[p + 1]].tolist() == want, p
    assert t.starts[1] - t.starts[0] >= idx.shape[0] and t.starts[10] == t.starts[15]


def test_the_transpose_is_kept_on_idx_until_idx_changes():
    idx = _lists()
    first = gather_backward.transpose(idx, 13)
    assert gather_backward.transpose(idx, 13) is first
    assert gather_backward.transpose(idx, 14) is not first                   # another number of rows
    idx[0, 0] = 12                                                           # an in-place change
    again = gather_backward.transpose(idx, 13)
    assert again is not first and again.starts[13] - again.starts[12] == 1 and again.order[-1] == 0


def _frame_definition(g, idx, tables):
    """``gP[p, c] = sum_{(i, j): idx[i, j] = p} sum_o T_o[i, c] g[i, j, c + o]`` (o = -2 .. 2, channels inside
    ``0 .. C - 1``), pair by pair in float64: ``T (5, N, C)`` plane ``o + 2``."""
    n, k, c = g.shape
    out = torch.zeros(tables.shape[1], c, dtype=torch.float64)
    for i in range(n):
        for j in range(k):
            for o in range(-2, 3):
                lo, hi = max(0, -o), min(c, c - o)                  # the channels ch with 0 <= ch + o < C
                out[idx[i, j], lo:hi] += tables[o + 2, i, lo:hi].double() * g[i, j, lo + o:hi + o].double()
    return out


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_frame_point_grad_is_the_pair_sum_of_the_definition(dtype, settings):
    """Any tables (not only rotations: the sum is the definition's for every coefficient); 70 channels, two
    channel tiles of which one partial."""
    idx = _lists()
    gen = torch.Generator().manual_seed(1)
    g = torch.randn(*idx.shape, 70, generator=gen, dtype=torch.float64).to(dtype)
    tables = torch.randn(5, idx.shape[0], 70, generator=gen, dtype=torch.float64).to(dtype)
    got = gather_backward.frame_point_grad(g, idx, tables)
    assert got.dtype == dtype
    want = _frame_definition(g, idx, tables)
    assert (want[9:] == 0).all() and (got[9:] == 0).all()                    # nobody's neighbour: zeros
    torch.testing.assert_close(got.double(), want, rtol=1e-12 if dtype == torch.float64 else 1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_relation_key_grad_is_the_pair_sum_of_the_definition(dtype, settings):
    idx = _lists()
    rows = 17                                                   # keys of more rows than queries
    g = torch.randn(*idx.shape, 70, generator=torch.Generator().manual_seed(2), dtype=torch.float64).to(dtype)
    want = torch.zeros(rows, 70, dtype=torch.float64)
    for i in range(idx.shape[0]):
        for j in range(idx.shape[1]):
            want[idx[i, j]] += g[i, j].double()
    got = gather_backward.relation_key_grad(g, idx, rows)
    assert got.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)    # the accumulation's
    torch.testing.assert_close(got.double(), want, rtol=1e-12 if dtype == torch.float64 else 1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_aggregate_value_grad_is_the_pair_sum_of_the_definition(dtype, settings):
    """Any weights (the sum is the definition's for every coefficient); 80 channels in 8 groups of 10: two
    channel tiles, one partial, and groups that straddle them."""
    idx = _lists()
    rows, groups = 12, 10
    gen = torch.Generator().manual_seed(4)
    probs = torch.rand(*idx.shape, groups, generator=gen, dtype=torch.float64).to(dtype)
    gy = torch.randn(idx.shape[0], 80, generator=gen, dtype=torch.float64).to(dtype)
    want = torch.zeros(rows, 80, dtype=torch.float64)
    group_of = torch.arange(80) % groups                                # channel c's group: c mod groups
    for i in range(idx.shape[0]):
        for j in range(idx.shape[1]):
            want[idx[i, j]] += probs[i, j, group_of].double() * gy[i].double()
    got = gather_backward.aggregate_value_grad(probs, gy, idx, rows)
    assert got.dtype == dtype and (got[9:] == 0).all()
    torch.testing.assert_close(got.double(), want, rtol=1e-12 if dtype == torch.float64 else 1e-5, atol=1e-5)


def _frame_inputs(dtype, idx=None, c=8):
    """Features, lists (default :func:`_lists` of 11 points, k = 4), GeoPE's rotation tables of random points
    (``c`` channels: blocks and pass-through), queries and an incoming gradient."""
    from pointgeope.geope import frequencies
    from pointgeope.model.rotation import rotation_tables

    idx = _lists(n=11, k=4) if idx is None else idx
    n, k = idx.shape
    gen = torch.Generator().manual_seed(3)
    coord = torch.rand(n, 3, generator=gen, dtype=torch.float64)
    tables = rotation_tables(coord.to(dtype), (frequencies(c) * 25.0 / 3).to(dtype), c)
    x, q = (torch.randn(n, c, generator=gen, dtype=torch.float64).to(dtype) for _ in range(2))
    return x, idx, tables, q, torch.randn(n, k, c, generator=gen, dtype=torch.float64).to(dtype)


@pytest.mark.parametrize("scatter,turn_first", [("sorted", False), ("sorted", True), ("atomic", False)])
def test_every_way_gives_the_float64_reference_gradients(scatter, turn_first, monkeypatch):
    """``frame_relation``, ``relation`` and ``aggregate`` through autograd on either scatter (standard GeoPE's
    sorted sum in one pass or two) against the float64 torch references' autograd (the same definitions,
    gathered by torch's indexing)."""
    monkeypatch.setattr(gather_backward, "SCATTER", scatter)
    monkeypatch.setattr(gather_backward, "FRAME_TURN_FIRST", turn_first)
    x, idx, tables, q, g = _frame_inputs(torch.float32)
    for fused, ref in ((lambda a, b: fused_attention.frame_relation(a, idx, tables, b), lambda a, b: ref_frame(
            a, idx, tables.double(), b, None)), (lambda a, b: fused_attention.relation(a, idx, b),
                                                  lambda a, b: ref_relation(a, idx, b, None))):
        got = [t.clone().requires_grad_() for t in (x, q)]
        want = [t.double().requires_grad_() for t in (x, q)]
        fused(*got).backward(g)
        ref(*want).backward(g.double())
        for a, b in zip(got, want, strict=True):
            torch.testing.assert_close(a.grad.double(), b.grad, rtol=1e-5, atol=1e-5)
    w, gy = g[..., :4], x[:, :8]                                  # logits of 4 groups, 2 channels each
    got = [t.clone().requires_grad_() for t in (w, x)]
    want = [t.double().requires_grad_() for t in (w, x)]
    fused_attention.aggregate(*got, idx, None, 2).backward(gy)
    ref_aggregate(*want, idx, None, 2).backward(gy.double())
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a.grad.double(), b.grad, rtol=1e-5, atol=1e-6)


def test_frame_relation_and_aggregate_on_sorted_sums_pass_gradcheck_in_float64():
    """3 points (point 2 nobody's neighbour, list 0 repeats point 0), one block and a pass-through channel: the
    frame relation, linear in ``x`` and ``q``, in fast mode (``v^T J u``: an error of 0.1 in one of its O(1)
    entries fails it; smaller ones the float32 gradients against the reference above), the aggregation's
    full Jacobian (softmax: nonlinear; 2 groups of 2 channels)."""
    x, idx, tables, q, _ = _frame_inputs(torch.float64, idx=torch.tensor([[0, 0], [0, 1], [1, 0]]), c=4)
    assert torch.autograd.gradcheck(fused_attention.frame_relation, [x.requires_grad_(), idx, tables,
                                                                     q.requires_grad_()], **LINEAR)
    w = torch.randn(3, 2, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(6)).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b: fused_attention.aggregate(a, b, idx, None, 2), [w, x],
                                    fast_mode=False)


@pytest.mark.parametrize("turn_first", [False, True])
def test_sorted_sums_are_the_same_bits_in_every_run(turn_first, monkeypatch):
    """Two backward passes, the second with the transpose computed again (a fresh ``idx``), summed by source
    point (the launches counted). On the serial interpreter the atomic kernels would repeat their bits too:
    this checks the sorted path runs and its transpose is deterministic; the CUDA test
    (``test_compiled_sorted_sums_on_cuda_repeat_bit_for_bit...``) checks the bits on parallel hardware."""
    monkeypatch.setattr(gather_backward, "FRAME_TURN_FIRST", turn_first)
    spies = _spy(monkeypatch, "triton_gather", "relation_gather", "frame_gather", "aggregate_gather")
    x, idx, tables, q, g = _frame_inputs(torch.float32)
    runs = []
    for lists in (idx, idx.clone()):
        leaves = [t.clone().requires_grad_() for t in (x, q)]
        fused_attention.frame_relation(leaves[0], lists, tables, leaves[1]).backward(g)
        fused_attention.relation(leaves[0], lists, leaves[1]).backward(g)
        fused_attention.aggregate(g[..., :4], leaves[0], lists, None, 2).backward(q)
        runs.append([t.grad for t in leaves])
    assert all(torch.equal(a, b) for a, b in zip(*runs, strict=True))
    counts = {name: spy.count for name, spy in spies.items()}         # the frame's turned pairs: relation_gather
    assert counts == {"relation_gather": 4 if turn_first else 2, "frame_gather": 0 if turn_first else 2,
                      "aggregate_gather": 2}


class Launches:
    """Stands in for a ``triton.jit`` kernel and counts its launches (then launches it)."""

    def __init__(self, kernel):
        self.kernel, self.count = kernel, 0

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.count += 1
            return self.kernel[grid](*args, **kwargs)
        return launch


def _spy(monkeypatch, module: str, *names: str) -> dict[str, Launches]:
    """Launch counters in place of kernels ``names`` of ``fused_attention.triton_kernels(module)``."""
    kernels_of = fused_attention.triton_kernels(module)
    spies = {name: Launches(getattr(kernels_of, name)) for name in names}
    for name, spy in spies.items():
        monkeypatch.setattr(kernels_of, name, spy)
    return spies


@pytest.mark.parametrize("case", ["sorted", "failed_between", "atomic_deterministic"])
def test_the_backward_follows_the_forwards_path_not_the_switch(interpreted, case):
    """``relation`` forward under ``forced("triton")``, its backward outside (the switch unset: torch on the
    CPU; on CUDA autograd's backward thread may not see the block): the Triton backward (the sum by source
    point) runs; torch's where the kernel failed in between, or where the backward would sum with atomics under
    deterministic algorithms. Always the definition's gradients."""
    from pointgeope.model import kernels
    from pointgeope.model.kernel_choice import forced

    interpreted.delenv("POINTGEOPE_KERNELS")
    interpreted.setattr(gather_backward, "SCATTER", "atomic" if case == "atomic_deterministic" else "sorted")
    spies = {**_spy(interpreted, "triton_gather", "relation_gather"),
             **_spy(interpreted, "triton_attention", "relation_backward")}
    x, idx, _, q, g = _frame_inputs(torch.float32)
    key, q = x.clone().requires_grad_(), q.clone().requires_grad_()
    assert not fused_attention.enabled("relation", key.device)
    kernels.reset()
    with forced("triton"):
        out = fused_attention.relation(key, idx, q)
    if case == "failed_between":
        with pytest.warns(kernels.KernelFallbackWarning, match="relation"):
            kernels.fail("relation", RuntimeError("injected"))
    if case == "atomic_deterministic":
        interpreted.setattr(torch, "are_deterministic_algorithms_enabled", lambda: True)
    out.backward(g)
    kernels.reset()
    launched = [spies["relation_gather"].count, spies["relation_backward"].count]
    assert launched == ([1, 1] if case == "sorted" else [0, 0])          # gkey by source; gq by query
    want = [torch.zeros_like(x).double().index_add_(0, idx.flatten(), g.double().flatten(0, 1)),
            -g.double().sum(1)]
    for got, w in zip((key.grad, q.grad), want, strict=True):
        torch.testing.assert_close(got.double(), w, rtol=1e-6, atol=1e-6)


def test_sorted_sums_keep_triton_under_deterministic_algorithms(monkeypatch):
    """The default ``"auto"`` sums by source point under deterministic algorithms, with atomics otherwise."""
    cuda = torch.device("cuda")
    monkeypatch.delenv("POINTGEOPE_KERNELS")
    monkeypatch.setattr(gather_backward, "SCATTER", "auto")
    assert not gather_backward.sorted_backward()
    monkeypatch.setattr(torch, "are_deterministic_algorithms_enabled", lambda: True)
    assert gather_backward.sorted_backward()
    ops = ("frame_relation", "relation", "aggregate")
    assert all(fused_attention.enabled(op, cuda) for op in ops)
    assert not fused_attention.enabled("linear_relation", cuda)              # its gradient: atomics
    monkeypatch.setattr(gather_backward, "SCATTER", "atomic")
    assert not any(fused_attention.enabled(op, cuda) for op in ops)
    monkeypatch.setattr(gather_backward, "SCATTER", "sorting")
    with pytest.raises(ValueError, match=r"SCATTER: expected one of \('auto', 'sorted', 'atomic'\), got 'sorting'"):
        fused_attention.enabled("relation", cuda)


def test_the_relations_of_one_neighbourhood_sort_it_once(monkeypatch):
    """Two relations and an aggregation on the same ``idx`` (a stage's layers), backward: one transpose."""
    sorts, sort = [], torch.sort
    monkeypatch.setattr(torch, "sort", lambda *a, **kw: sorts.append(1) or sort(*a, **kw))
    x, idx, tables, q, g = _frame_inputs(torch.float32)
    x.requires_grad_()
    out = fused_attention.frame_relation(x, idx, tables, q) + fused_attention.relation(2 * x, idx, q)
    out = fused_attention.aggregate(out[..., :4], x, idx, None, 2)              # the layer's aggregation
    out.backward(q)
    assert len(sorts) == 1 and x.grad is not None


@pytest.mark.slow
def test_the_benchmark_times_both_scatters_and_the_sweep(interpreted, tmp_path):
    """``bench/bench_relation_backward.py``'s ``main`` at a tiny size under the interpreter, in this process (its
    command line is argparse's; what is tested is what it times and records): every row, and the two scatters'
    gradients equal within float32 rounding. The bench refuses to time a row under another scatter than its
    label (``SCATTER`` is ``"auto"`` here: atomic), so a sorted row or sweep point outside
    ``gather_backward.scatter("sorted")`` fails it. Its hierarchy is built on torch's path (the same lists:
    test_triton_ops.py), not the interpreted k-NN kernel, which would take half the test's time. 300 points
    leave 18 at stage 2, still more than its 16 neighbours, where 400 left 25: fewer programs a launch (each a
    pass of the interpreter, in every timed call and sweep point)."""
    import importlib.util
    import json
    import sys
    from pathlib import Path

    from pointgeope.model.kernel_choice import forced

    repo = Path(__file__).resolve().parents[2]
    interpreted.setattr(sys, "path", list(sys.path))    # the bench puts bench/ first: undone after the test
    spec = importlib.util.spec_from_file_location("bench_relation_backward", repo / "bench" /
                                                  "bench_relation_backward.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    build = bench.HierarchySpec

    def on_torch(*args):
        def run(*inputs):
            with forced("torch"):
                return build(*args)(*inputs)
        return run
    interpreted.setattr(bench, "HierarchySpec", on_torch)
    out = tmp_path / "rb.json"
    interpreted.setattr(sys, "argv", ["bench_relation_backward.py", "--out", str(out), "--device", "cpu",
                                      "--clouds", "1", "--points", "300", "--stages", "2", "--dtypes", "float32",
                                      "--sweep-stages", "2", "--sweep-dtype", "float32", "--reps", "1",
                                      "--warmup", "0"])      # the interpreter compiles nothing: no untimed first call
    bench.main()
    result = json.loads(out.read_text())
    assert result["warmup"] == 0
    (key, row), = result["stages"].items()
    assert key == "stage2_n18_k16_c128_float32"
    assert all(row[f"{op}_{s}"] > 0 for op in ("frame", "relation") for s in ("atomic", "sorted"))
    assert row["frame_max_rel"] < 1e-6 and row["relation_max_rel"] < 1e-6 and row["transpose"] > 0
    sweep = result["sweep"]["stage2_float32"]
    assert sorted(sweep) == ["aggregate", "frame"] and all(len(rows) == 6 for rows in sweep.values())
    assert sweep["frame"]["t0_b2048_r4_w8"] == {"seconds": sweep["frame"]["t0_b2048_r4_w8"]["seconds"],
                                                "tiles": [2, 16, 64], "default": True}
    assert [row["default"] for row in sweep["aggregate"].values()] == [False, True, False, False, False, False]
    assert all(row[f"{op}_{s}"] > 0 for op in ("aggregate",) for s in ("atomic", "sorted"))
    assert row["aggregate_max_rel"] < 1e-6


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_compiled_sorted_sums_on_cuda_repeat_bit_for_bit_and_agree_with_the_atomic_ones(interpreted):
    """The kernels compiled for the GPU (no interpreter), 3000 points of k = 16 lists, 64 channels: two
    backward passes of the three ops give the same bits, and the atomic kernels' sums within float32 rounding."""
    interpreted.setenv("TRITON_INTERPRET", "0")
    from pointgeope.model.ops import knn

    cuda = torch.device("cuda")
    gen = torch.Generator().manual_seed(7)
    coord = torch.rand(3000, 3, generator=gen).to(cuda)
    idx, _ = knn(coord, coord, 16, torch.tensor([3000]), torch.tensor([3000]))
    x, idx, tables, q, g = (t.to(cuda) for t in _frame_inputs(torch.float32, idx=idx.cpu(), c=64))
    runs = {}
    for way in ("sorted", "sorted", "atomic"):
        with gather_backward.scatter(way):
            leaves = [t.clone().requires_grad_() for t in (x, q)]
            out = (fused_attention.frame_relation(leaves[0], idx, tables, leaves[1])
                   + fused_attention.relation(leaves[0], idx, leaves[1]))
            fused_attention.aggregate(out[..., :8], leaves[0], idx, None, 8).backward(q)
            runs.setdefault(way, []).append([t.grad for t in leaves])
    assert all(torch.equal(a, b) for a, b in zip(*runs["sorted"], strict=True))
    for a, b in zip(runs["sorted"][0], runs["atomic"][0], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5 * b.abs().max().item())
