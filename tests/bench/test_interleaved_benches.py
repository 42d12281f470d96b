"""The GPU benchmarks' comparisons, run on the CPU: bench_hierarchy.time_hierarchy and
bench_relation_backward.time_stage time their sides interleaved (A, B; B, A ...) and pair the rounds."""
from __future__ import annotations

import pytest
import torch

import bench_hierarchy


def test_time_hierarchy_interleaves_backends_and_records_the_one_that_cannot_run(monkeypatch):
    calls = []
    run = bench_hierarchy._run

    def recording(label, coord, offset, device):
        calls.append(label)
        if label == "cluster":              # torch-cluster may be installed: make the failure certain
            raise ImportError("torch-cluster is not installed")
        return run(label, coord, offset, device)

    monkeypatch.setattr(bench_hierarchy, "_run", recording)
    out = bench_hierarchy.time_hierarchy(["cpu", "cluster", "default"], clouds=2, points=3000, device="cpu",
                                         reps=4, warmup=1)
    # one warm-up each (cluster fails there), then rounds rotated: cpu default, default cpu, ...
    assert calls == ["cpu", "cluster", "default"] + ["cpu", "default", "default", "cpu"] * 2
    assert list(out) == ["cpu", "cluster", "default"]
    assert out["cluster"] == {"error": "ImportError: torch-cluster is not installed"}
    for label in ("cpu", "default"):
        row = out[label]
        assert len(row["all_seconds"]) == 4 and row["seconds"] == min(row["all_seconds"])
        assert row["agree"] == 1.0 and row["same_samples"] is True      # the same backends on the CPU
    ratios = [d / c for d, c in zip(out["default"]["all_seconds"], out["cpu"]["all_seconds"], strict=True)]
    assert out["default"]["paired_range"] == [round(min(ratios), 4), round(max(ratios), 4)]
    assert out["cpu"]["paired_median"] == 1.0


def test_the_searched_up_baseline_searches_every_row_and_gives_the_same_hierarchy(monkeypatch):
    """``cpu_searched_up``, the baseline of the 3-NN up read from the neighbourhoods, asks the search for every row
    of each stage (the shortcut would ask for fewer) and its hierarchy is the ``cpu`` label's, bit for bit."""
    import sys

    hierarchy = sys.modules["pointgeope.model.ops.hierarchy"]
    asked, real = [], hierarchy.knn

    def counting(query, support, k, q_off, s_off, **kwargs):
        if k == 3:
            asked.append(query.shape[0])
        return real(query, support, k, q_off, s_off, **kwargs)
    monkeypatch.setattr(hierarchy, "knn", counting)
    out = bench_hierarchy.time_hierarchy(["cpu", "cpu_searched_up"], clouds=2, points=3000, device="cpu", reps=1,
                                         warmup=1)
    assert out["cpu_searched_up"]["identical"] is True
    assert asked[-4:] == [6000, 1500, 374, 92]                  # the last round's: every row of stages 0-3
    assert all(a < n for a, n in zip(asked[:4], [6000, 1500, 374, 92], strict=True))   # the cpu label's: fewer


@pytest.mark.slow
def test_relation_backward_time_stage_interleaves_scatters(monkeypatch, kernel_failures_forgotten):
    pytest.importorskip("triton")
    import os

    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the fused attention's Triton kernels need CUDA or TRITON_INTERPRET=1")
    import bench_relation_backward as brb
    from pointgeope.model import gather_backward
    from pointgeope.model.ops import HierarchySpec

    coord = brb.synthetic_room(400, seed=0)
    offset = torch.tensor([400])
    h = HierarchySpec(brb.STRIDES[:2], brb.NEIGHBOURS[:2])(coord, offset)
    seen = []
    backward = brb._backward

    def recording(op, t, way):
        run = backward(op, t, way)

        def timed_call():
            seen.append((op, way, gather_backward.SCATTER, gather_backward.FRAME_TURN_FIRST))
            return run()
        return timed_call

    monkeypatch.setattr(brb, "_backward", recording)
    t = brb.stage_inputs(h, [coord, coord[h.samples[1]]], 0, torch.float32)
    row = brb.time_stage(t, torch.device("cpu"), reps=2)
    # every call ran under its own scatter setting, whatever came before it
    assert all(scatter == way for _, way, scatter, _ in seen)
    assert {(op, turn) for op, _, _, turn in seen if turn} == {("frame", True)}
    frame = [(way, turn) for op, way, _, turn in seen if op == "frame"]
    # warm-up of each side, then 2 rounds of 3 sides rotated
    assert frame == [("atomic", False), ("sorted", False), ("sorted", True),
                     ("atomic", False), ("sorted", False), ("sorted", True),
                     ("sorted", False), ("sorted", True), ("atomic", False)]
    for op in brb.OPS:
        assert row[f"{op}_max_rel"] < 1e-5
        assert row[f"{op}_sorted_over_atomic_paired_range"][0] <= row[f"{op}_sorted_over_atomic"] \
            <= row[f"{op}_sorted_over_atomic_paired_range"][1]


def test_bench_fps_times_its_variants_with_the_shared_timer(monkeypatch):
    """bench_fps's worker on small clouds: every variant paired against the bare fpsample call per round
    (``interleave.paired``'s keys), and the loader's samples still those of the torch backend."""
    pytest.importorskip("fpsample")
    import types

    import bench_fps

    monkeypatch.setattr(bench_fps, "N", 3000)
    monkeypatch.setattr(bench_fps, "M", 500)
    threads = torch.get_num_threads()
    try:
        out = bench_fps.worker(types.SimpleNamespace(threads=[1], rounds=3, leaves=[16, 32]))
    finally:
        torch.set_num_threads(threads)
    for table in out["clouds"].values():
        assert list(table) == ["bare_fpsample_h7", "loader", "old_wrapper_fpsample_h9"]
        for row in table.values():
            assert len(row["paired_ratios"]) == 3 and "median_paired_ratio" not in row
            assert row["paired_range"][0] <= row["paired_median"] <= row["paired_range"][1]
        assert table["bare_fpsample_h7"]["paired_ratios"] == [1.0, 1.0, 1.0]
    assert out["room_extras"]["loader_equals_torch_backend"] is True
    assert list(out["room_extras"]["seconds_per_leaf"]) == ["leaf_16", "leaf_32"]


def test_time_hierarchy_waits_for_the_device_with_the_package_wait(monkeypatch):
    """The interleaved rounds wait for the device with ``kernel_check.sync`` (``timed``'s wait), before and
    after every timed call, on the device of the run."""
    from pointgeope.model import kernel_check

    assert bench_hierarchy.sync is kernel_check.sync
    waits = []
    monkeypatch.setattr(bench_hierarchy, "sync", lambda device: waits.append(device))
    bench_hierarchy.time_hierarchy(["cpu", "default"], clouds=1, points=2000, device="cpu", reps=3, warmup=1)
    assert waits == [torch.device("cpu")] * (2 * 2 * 3)


def test_a_backend_failing_in_the_timed_rounds_loses_only_its_own_row(monkeypatch):
    """``default`` runs its warm-up and round 1, then fails (a CUDA OOM at round 2, say): its row records the
    error, the rounds start again without it, and ``cpu`` keeps a full row."""
    calls = []
    run = bench_hierarchy._run

    def failing(label, coord, offset, device):
        calls.append(label)
        if label == "default" and calls.count("default") == 3:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore detail")
        return run(label, coord, offset, device)

    monkeypatch.setattr(bench_hierarchy, "_run", failing)
    out = bench_hierarchy.time_hierarchy(["cpu", "default"], clouds=1, points=2000, device="cpu", reps=3, warmup=1)
    # warm-ups; round 1 (cpu, default), round 2 (default fails); then 3 rounds of cpu alone
    assert calls == ["cpu", "default", "cpu", "default", "default"] + ["cpu"] * 3
    assert out["default"] == {"error": "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
                                       " (in the timed rounds)"}
    assert len(out["cpu"]["all_seconds"]) == 3 and out["cpu"]["paired_median"] == 1.0
    assert out["cpu"]["agree"] == 1.0 and list(out) == ["cpu", "default"]


def test_every_backend_failing_gives_every_error(monkeypatch):
    def failing(label, coord, offset, device):
        if failing.calls == 2:                  # both warm-ups pass, the first timed call fails
            raise RuntimeError(f"{label} broke")
        failing.calls += 1

    failing.calls = 0
    monkeypatch.setattr(bench_hierarchy, "_run", failing)
    out = bench_hierarchy.time_hierarchy(["cpu", "torch"], clouds=1, points=500, device="cpu", reps=2)
    assert out == {"cpu": {"error": "RuntimeError: cpu broke (in the timed rounds)"},
                   "torch": {"error": "RuntimeError: torch broke (in the timed rounds)"}}


def test_the_separate_baseline_is_the_same_hierarchy_bit_for_bit_and_its_parts_are_within_it():
    """``cpu_separate`` (every kNN its own tree and search) builds what ``cpu`` does, every tensor equal; the
    ``identical`` field sees one value changed; ``time_parts`` times the fps and knn calls of both labels."""
    out = bench_hierarchy.time_hierarchy(["cpu_separate", "cpu"], clouds=2, points=3000, device="cpu", reps=2)
    assert out["cpu"]["identical"] is True and out["cpu_separate"]["identical"] is True
    assert out["cpu_separate"]["cpu_paired_median"] == 1.0 and 0 < out["cpu"]["cpu_seconds"]
    coord, offset = bench_hierarchy.batch(1, 2000)
    h = bench_hierarchy._run("cpu", coord, offset, torch.device("cpu"))
    changed = h.apply(torch.clone)
    changed.up_dist2[1][5, 2] += 1e-3
    assert bench_hierarchy._agreement(changed, h)["identical"] is False
    assert bench_hierarchy._agreement(h.apply(torch.clone), h)["identical"] is True
    parts = bench_hierarchy.time_parts(["cpu_separate", "cpu"], clouds=1, points=3000, reps=2)
    for row in parts.values():
        assert 0 < row["fps_s"] and 0 < row["knn_s"] and row["fps_s"] + row["knn_s"] <= row["total_s"]
        assert 0 < row["knn_share"] < 1


def test_bench_norm_times_the_padded_plain_norm_on_the_kernel_and_on_the_prefix_ops(monkeypatch,
                                                                                    kernel_failures_forgotten):
    """``bench_norm.padded_case`` on the CPU (the kernel in Triton's interpreter; no graph there): its two sides run
    what a padded batch's third norm runs, interleaved, a warm-up run before each timed one: the plain kernel with
    the real prefix (``valid``, the last 1/32 rows dummy) and the torch ops' prefix statistics with the same prefix;
    their outputs and input gradients agree to float32 rounding."""
    pytest.importorskip("triton")
    import bench_norm
    from pointgeope.model import norm

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.delenv("POINTGEOPE_KERNELS", raising=False)
    calls, fused, ops = [], norm.PLAIN_KERNEL.triton, norm.prefix_batch_norm
    monkeypatch.setattr(norm.PLAIN_KERNEL, "triton", lambda *a: calls.append(("kernel", int(a[8]))) or fused(*a))
    monkeypatch.setattr(norm, "prefix_batch_norm", lambda *a: calls.append(("ops", int(a[1]))) or ops(*a))
    row = bench_norm.padded_case(96, 8, torch.float32, torch.device("cpu"), reps=2)
    assert calls == ([("ops", 93)] * 2 + [("kernel", 93)] * 2) * 2
    assert (row["rows"], row["valid"], row["width"], row["dtype"], row["relu"]) == (96, 93, 8, "float32", False)
    assert row["torch_ms"] > 0 and row["fused_ms"] > 0 and row["fused_over_torch"] == row["fused_ms"] / row["torch_ms"]
    assert row["max_rel_diff_y"] < 1e-5 and row["max_rel_diff_dx"] < 1e-5 and "graph_fused_ms" not in row


@pytest.mark.parametrize("train", [True, False])
def test_bench_norm_times_the_blocks_tail_on_torch_and_on_the_kernels(monkeypatch, kernel_failures_forgotten, train):
    """``bench_norm.residual_case`` on the CPU (the kernels in Triton's interpreter): its torch side runs no residual
    kernel, its kernel side the training kernel (``train``: forward + backward) or the eval one (the forward
    alone), a warm-up run before each timed one, two reps; the outputs (and input gradients) agree to float32
    rounding, and the row says which mode it timed."""
    pytest.importorskip("triton")
    import bench_norm
    from pointgeope.model import residual_norm

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.delenv("POINTGEOPE_KERNELS", raising=False)
    calls = []
    for kernel in (residual_norm.KERNEL, residual_norm.EVAL_KERNEL):
        monkeypatch.setattr(kernel, "triton", lambda *a, k=kernel, f=kernel.triton: calls.append(k.name) or f(*a))
    row = bench_norm.residual_case(96, 8, torch.float32, torch.device("cpu"), reps=2, train=train)
    assert calls == ["batch_norm_add_relu" if train else "batch_norm_add_relu_eval"] * 4
    assert (row["rows"], row["width"], row["dtype"], row["train"]) == (96, 8, "float32", train)
    assert row["torch_ms"] > 0 and row["fused_ms"] > 0 and row["fused_over_torch"] == row["fused_ms"] / row["torch_ms"]
    assert row["max_rel_diff_y"] < 1e-5 and row["max_rel_diff_dx"] < 1e-5


def test_bench_norm_graphs_a_side_with_the_training_steps_recorder(monkeypatch):
    """``bench_norm.graphed`` records a side with ``engine/graphs.py``'s recorder (the one owner of a capture; on
    the CPU its stand-in ``RerunRecorder``, which replays by running the side again): a replay answers the side's
    outputs for the inputs as they are now, in the tensors the recording returned."""
    import bench_norm
    from pointgeope.engine import graphs

    made = []
    monkeypatch.setattr(graphs, "CudaRecorder", lambda device: made.append(device) or graphs.RerunRecorder())
    module = torch.nn.Linear(3, 2)
    x = torch.randn(5, 3, requires_grad=True)

    def run():
        x.grad = None
        y = module(x)
        y.sum().backward()
        return y.detach(), x.grad
    replay = bench_norm.graphed(run, module, torch.device("cpu"))
    assert made == [torch.device("cpu")]
    first = replay()
    with torch.no_grad():
        x.mul_(2)
    again = replay()
    assert all(a is b for a, b in zip(first, again, strict=True))             # the recorded (static) outputs
    torch.testing.assert_close(again[0], module(x).detach())
    torch.testing.assert_close(again[1], module.weight.sum(0).expand(5, 3))


def test_hierarchy_json_records_bench_io_provenance(monkeypatch, tmp_path):
    """The saved JSON carries the one provenance every bench writes (commit, dirty, versions, CPU model)."""
    import json
    import sys

    import bench_io

    out = tmp_path / "hierarchy.json"
    monkeypatch.setattr(sys, "argv", ["bench_hierarchy.py", "--out", str(out), "--device", "cpu", "--clouds", "1",
                                      "--points", "2000", "--backends", "cpu", "--reps", "1", "--warmup", "0"])
    bench_hierarchy.main()
    got = json.loads(out.read_text())
    prov = got["provenance"]
    assert prov["commit"] == bench_io.git_commit() and prov["cpu_model"] == bench_io.cpu_model()
    assert set(prov["versions"]) == {"numpy", "torch", "numba", "pykdtree"}
    assert prov["threads"] == torch.get_num_threads() and "1x2000" in got["cases"]


def test_bench_norm_runs_each_kind_of_case_in_its_order_and_saves_every_row(monkeypatch, tmp_path, capsys):
    """``bench_norm.main`` runs the plain and ReLU cases, then the padded ones, then the residual ones (a failure in
    a later kind keeps the earlier rows), each in bf16 then float32 at ``rows // --scale`` with its own setting,
    saves each row under ``cases`` named as listed, and prints a line per row (the padded ones' sides named the
    prefix ops and the kernel)."""
    import inspect
    import json
    import sys

    import bench_norm

    calls = []

    def kind(label, real):
        def case(*args, **kwargs):                  # the real case's arguments, however they are passed
            given = inspect.signature(real).bind(*args, **kwargs).arguments
            rows, width, dtype, _, reps = (given.pop(k) for k in ("rows", "width", "dtype", "device", "reps"))
            calls.append((label, rows, width, str(dtype)[6:], reps, given))
            return {"rows": rows, "width": width, "dtype": str(dtype)[6:], "torch_ms": 2.0, "fused_ms": 1.0,
                    "fused_over_torch": 0.5, **({"valid": rows - rows // 32} if label == "padded" else {})}
        return case
    for name, label in (("one_case", "plain"), ("padded_case", "padded"), ("residual_case", "residual")):
        monkeypatch.setattr(bench_norm, name, kind(label, getattr(bench_norm, name)))
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    out = tmp_path / "norm.json"
    monkeypatch.setattr(sys, "argv", ["bench_norm.py", "--device", "cpu", "--scale", "1000", "--reps", "3",
                                      "--out", str(out)])
    assert bench_norm.main() == 0
    listed = ([(n, "plain", r, w, {"relu": x}) for n, r, w, x in bench_norm.CASES]
              + [(n, "padded", r, w, {}) for n, r, w in bench_norm.PADDED]
              + [(n, "residual", r, w, {"train": x}) for n, r, w, x in bench_norm.RESIDUAL])
    assert calls == [(label, rows // 1000, width, dtype, 3, setting) for _, label, rows, width, setting in listed
                     for dtype in ("bfloat16", "float32")]
    cases = json.loads(out.read_text())["cases"]
    assert [row["case"] for row in cases] == [name for name, *_ in listed for _ in range(2)]
    assert cases[0] == {"case": "pairs s1", "rows": 20_480, "width": 32, "dtype": "bfloat16", "torch_ms": 2.0,
                        "fused_ms": 1.0, "fused_over_torch": 0.5}
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["pairs", "s1", "bfloat16", "torch", "2.000", "ms", "fused", "1.000", "ms", "x0.50"]
    assert lines[2 * len(bench_norm.CASES)].split()[4:] == ["prefix", "ops", "2.000", "ms", "kernel", "1.000", "ms",
                                                            "x0.50"]
