"""The CUDA-graph step's bookkeeping (engine/graphs.py) on the CPU: a recorder whose replay runs the recorded
step again stands in for the graph. Against the eager step on a twin model, batch after batch of other sizes:
the same losses, parameters, running statistics and optimiser state."""
from __future__ import annotations

import copy
from types import SimpleNamespace

import pytest
import torch

from pointgeope.engine import graphs
from pointgeope.engine.config import Config, OptimConfig, TrainConfig
from pointgeope.engine.state import Learner
from pointgeope.engine.step import train_step
from pointgeope.model import PointTransformerSeg
from pointgeope.model.kernel_choice import forced

SMALL = dict(planes=(8, 16, 16), share_planes=4, blocks=(1, 1, 1), decoder_blocks=(1, 1, 1), strides=(1, 4, 4),
             neighbours=(8, 16, 16))


def _learner(model):
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, [2], gamma=0.1)
    return Learner(model, opt, sched, torch.amp.GradScaler("cuda", enabled=False))


def _batch(model, sizes, seed):
    g = torch.Generator().manual_seed(seed)
    n = sum(sizes)
    coord, feat = torch.rand(n, 3, generator=g, dtype=torch.float64), torch.rand(n, 6, generator=g, dtype=torch.float64)
    y = torch.randint(0, 13, (n,), generator=g)
    y[::5] = 255
    offset = torch.tensor(sizes).cumsum(0)
    return SimpleNamespace(pos=coord, x=feat, y=y, ptr=torch.cat([offset.new_zeros(1), offset]),
                           hierarchy=model.hierarchy_spec(coord, offset))


class _Counting(graphs.RerunRecorder):
    def __init__(self, fail: bool = False):
        self.recorded, self.fail = 0, fail

    def record(self, step, model, before):
        if self.fail:
            step()              # a capture that fails half-way, after the step ran its kernels
            raise RuntimeError("operation not permitted when stream is capturing")
        self.recorded += 1
        return super().record(step, model, before)


def _pair(pe="rpe", clip=None, **shape):
    torch.manual_seed(0)
    model = PointTransformerSeg(pe=pe, **{**SMALL, **shape}).double().train()
    twin = copy.deepcopy(model)
    cfg = Config(train=TrainConfig(loss="ce"), optim=OptimConfig(grad_clip=clip))
    return cfg, model, _learner(model), twin, _learner(twin)


@pytest.mark.parametrize("pe,clip", [("rpe", None), ("geope", 1.0)])
def test_graphed_steps_are_the_eager_steps(pe, clip):
    """Five steps over batches of three sizes (two share a padded size): the graphed learner ends where the
    eager one does, and one graph was recorded per padded size."""
    cfg, model, learner, twin, twin_learner = _pair(pe, clip)
    cpu = torch.device("cpu")
    recorder = _Counting()
    step = graphs.GraphedStep(cfg, learner, model, cpu, recorder,
                              lambda b, u=None: train_step(cfg, learner, model, b, cpu, u), log=lambda line: None)
    seen = []
    with forced("torch"):
        for seed, sizes in enumerate([(300, 420), (310, 400), (600, 330), (300, 420), (290, 431)]):
            batch = _batch(model, sizes, seed)
            logits, loss = step(batch, lambda t, norm: seen.append(t.item()) or seen[-1])
            want_logits, want = train_step(cfg, twin_learner, twin, batch, cpu)
            assert loss == pytest.approx(want, rel=1e-10) and loss == seen[-1]   # the check's value returned
            torch.testing.assert_close(logits, want_logits, rtol=1e-8, atol=1e-9)
    assert recorder.recorded == len(step.graphs) == 2
    assert len(seen) == 5
    for (name, a), b in zip(model.state_dict().items(), twin.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10, msg=name)
    for a, b in zip(learner.optimizer.state.values(), twin_learner.optimizer.state.values(), strict=True):
        torch.testing.assert_close(a["momentum_buffer"], b["momentum_buffer"], rtol=1e-8, atol=1e-10)
    assert learner.lr() == twin_learner.lr()


def test_a_failed_recording_changes_nothing_and_steps_eagerly():
    """The capture fails after its step ran: buffers are put back, one line is logged, and this and every
    later batch take the eager step (the same state as the twin's eager steps)."""
    cfg, model, learner, twin, twin_learner = _pair()
    cpu, lines = torch.device("cpu"), []
    step = graphs.GraphedStep(cfg, learner, model, cpu, _Counting(fail=True),
                              lambda b, u=None: train_step(cfg, learner, model, b, cpu, u), log=lines.append)
    with forced("torch"):
        for seed in range(2):
            batch = _batch(model, (300, 420), seed)
            step(batch)
            train_step(cfg, twin_learner, twin, batch, cpu)
    assert len(lines) == 1 and "recording failed" in lines[0] and "stream is capturing" in lines[0]
    for (name, a), b in zip(model.state_dict().items(), twin.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10, msg=name)


def test_more_sizes_than_graphs_step_eagerly(monkeypatch):
    cfg, model, learner, *_ = _pair()
    cpu, calls = torch.device("cpu"), []
    monkeypatch.setattr(graphs, "MAX_GRAPHS", 1)
    lines = []
    step = graphs.GraphedStep(cfg, learner, model, cpu, _Counting(), lambda b, u=None: calls.append(b) or (None, 0.0),
                              log=lines.append)
    with forced("torch"):
        step(_batch(model, (300, 420), 0))
        step(_batch(model, (900, 420), 1))          # another padded size: eager
        step(_batch(model, (301, 420), 2))          # the recorded one
        step(_batch(model, (900, 800), 3))          # a third size: eager, said once
    assert len(calls) == 2 and len(step.graphs) == 1
    assert lines == ["train.cuda_graphs: 1 sizes recorded; batches of other sizes step eagerly"]


def test_training_step_says_why_it_is_eager():
    """On the CPU (and wherever graphs do not apply) ``train.cuda_graphs`` gives the eager step and one line."""
    cfg, model, learner, *_ = _pair()
    cfg.train.cuda_graphs, lines = True, []
    step = graphs.training_step(cfg, learner, model, torch.device("cpu"), lines.append)
    assert not isinstance(step, graphs.GraphedStep)
    assert lines == ["train.cuda_graphs: eager steps (graphs are CUDA's, and this run is on cpu)"]
    cfg.train.cuda_graphs, lines = False, []
    graphs.training_step(cfg, learner, model, torch.device("cpu"), lines.append)
    assert lines == []


def _small_bench_network(monkeypatch):
    """The benches' network (``bench_train_step.Case``'s, and the hierarchy ``bench_graphs.run`` gives it) made
    ``SMALL``'s three stages: what these tests check is the bench's bookkeeping, which PointTransformerSeg50's five
    stages (each step about 20 times the time) do not change."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import bench_graphs
    import bench_train_step

    def small(pe="rpe"):
        return PointTransformerSeg(pe=pe, **SMALL)

    monkeypatch.setattr(bench_train_step, "PointTransformerSeg", small)
    monkeypatch.setattr(bench_graphs, "PointTransformerSeg", small)
    return bench_graphs


def test_the_bench_compares_the_two_steps(tmp_path, monkeypatch):
    """``bench/bench_graphs.py``'s command on the CPU (the rerun recorder; its ``main`` in this process, as
    ``python bench/bench_graphs.py`` runs it, on ``SMALL``'s network): one recorded graph, losses that agree to
    float32's rounding, and both times, in the JSON it writes. 300 points a cloud keep 18 at the last stage (a
    sixteenth): with fewer than its 16 neighbours the kNN repeats neighbours, a batch norm's variance is zero in
    exact arithmetic and it scales rounding by 1 / sqrt(eps) (PointTransformerSeg50 at 500 points a cloud: the
    losses differ by 2e-3)."""
    import json
    import sys

    bench_graphs = _small_bench_network(monkeypatch)
    out = tmp_path / "graphs.json"
    monkeypatch.setattr(sys, "argv", ["bench_graphs.py", "--out", str(out), "--device", "cpu", "--points", "300",
                                      "--clouds", "1", "--presets", "rpe", "--amps", "none", "--reps", "1",
                                      "--warmup", "0"])
    assert bench_graphs.main() == 0
    row = json.loads(out.read_text())["cases"]["rpe/none"]
    assert row["recorded"] == 1 and row["loss_rel_diff"] < 1e-5 and row["eager_s"] > 0 and row["graph_s"] > 0


def test_the_bench_frees_each_case_before_recording_the_next(monkeypatch):
    """``bench_graphs.run`` holds one case at a time: when a preset x precision's graphed cases are built, no
    earlier case and no earlier recorder (on CUDA: its graphs' memory pool) is referenced any more; within a
    case the rounds interleave the eager step and the graphed and padded eager steps with the third norm on the
    plain kernel and on the torch ops' prefix statistics (each side's steps inside its ``third_norm``); on
    ``SMALL``'s network."""
    import weakref

    from pointgeope.model import norm

    bench_graphs = _small_bench_network(monkeypatch)
    built, order, defaults = [], [], []

    class Tracked(bench_graphs.GraphCase):
        def __init__(self, preset, inputs, amp, device, rerun=False, third="kernel", recorder=None):
            held = [key for key, case, recorder in built if key != (preset, amp) and (case() or recorder())]
            assert not held, f"{held} still referenced when {preset}/{amp} is built"
            super().__init__(preset, inputs, amp, device, rerun, third, recorder)
            built.append(((preset, amp), weakref.ref(self), weakref.ref(self.graphed.recorder)))
            self.label = ("padded_eager" if rerun else "graph") + ("" if third == "kernel" else "_prefix_ops"), amp

        def step(self, given):
            order.append(self.label)
            super().step(given)

    class Eager(bench_graphs.Case):
        def __init__(self, preset, inputs, amp, device):
            super().__init__(preset, inputs, amp, device)
            self.label = ("eager", amp)

        def step(self, given):
            order.append(self.label)
            super().step(given)

    monkeypatch.setattr(bench_graphs, "GraphCase", Tracked)
    monkeypatch.setattr(bench_graphs, "Case", Eager)
    call, registered = graphs.GraphedStep.__call__, norm.PLAIN_KERNEL.cuda_default
    monkeypatch.setattr(graphs.GraphedStep, "__call__",
                        lambda step, *a: defaults.append(norm.PLAIN_KERNEL.cuda_default) or call(step, *a))
    # 520 points: 32 rows at SMALL's third stage (n // 16; PointTransformerSeg50's fifth had two, n // 256)
    args = SimpleNamespace(device="cpu", points=520, clouds=1, presets=["rpe"], amps=["none", "bf16"], reps=2,
                           warmup=0, budget=600.0)             # bf16: float32 on the CPU, a second case all the same
    out = {}
    bench_graphs.run(args, out, lambda: None)
    sides = ("graph", "graph_prefix_ops", "padded_eager", "padded_eager_prefix_ops")
    assert [key for key, _, _ in built] == [("rpe", "none")] * 4 + [("rpe", "bf16")] * 4
    assert order == [(label, amp) for amp in ("none", "bf16") for _ in range(2) for label in ("eager", *sides)]
    # each graphed step inside its side's third_norm: the registered default, or opt-in (False) for the torch ops
    assert defaults == [default for _ in ("none", "bf16") for default in [registered, False]
                        + [registered, False, registered, False] * 2] and norm.PLAIN_KERNEL.cuda_default is registered
    for row in out["cases"].values():
        assert row["reps"] == 2 and row["recorded"] == row["prefix_ops_recorded"] == 1
        assert all(row[f"{side}_s"] > 0 for side in sides)
        assert row["ratio"] == row["graph_s"] / row["eager_s"]
        assert row["graph_vs_prefix_ops"] == row["graph_s"] / row["graph_prefix_ops_s"]
        assert row["padded_vs_prefix_ops"] == row["padded_eager_s"] / row["padded_eager_prefix_ops_s"]


def test_the_benchs_two_third_norms_take_their_paths(monkeypatch):
    """``bench_graphs.third_norm``: inside a padded batch on CUDA tensors (a device name: nothing runs), with
    ``POINTGEOPE_KERNELS`` unset, ``"kernel"`` leaves the plain kernel its default (it runs) and ``"prefix_ops"``
    makes it opt-in as it was (the torch ops' prefix statistics run); the registration is back after each, and
    another path is refused."""
    import sys
    from pathlib import Path

    from pointgeope.model import kernels, norm, padding

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import bench_graphs

    cuda, registered = torch.device("cuda"), norm.PLAIN_KERNEL.cuda_default
    monkeypatch.delenv("POINTGEOPE_KERNELS", raising=False)
    monkeypatch.setattr(kernels, "FAILURES", type(kernels.FAILURES)())       # no failure of earlier tests
    with padding.batch_rows({}):
        for path, runs in (("kernel", kernels.triton_imports()), ("prefix_ops", False)):
            with bench_graphs.third_norm(path):
                assert norm.PLAIN_KERNEL.enabled(cuda) == runs, path
            assert norm.PLAIN_KERNEL.cuda_default is registered
    with pytest.raises(ValueError, match="expected a third norm's path in"), bench_graphs.third_norm("torch"):
        pass


def test_the_capture_records_the_sorts_of_the_batch_it_records(monkeypatch):
    """The kNN lists' transposes cached on the graph's hierarchy during the warm-up are dropped before the
    capture (a graph would otherwise replay the warm-up batch's transpose): the tensors handed to
    ``forget_transposes`` are the recorded graph's neighbourhoods, and it drops their cache."""
    from pointgeope.model import gather_backward

    cfg, model, learner, *_ = _pair()
    forgotten = []
    monkeypatch.setattr(graphs, "forget_transposes", lambda tensors: forgotten.extend(tensors))
    step = graphs.GraphedStep(cfg, learner, model, torch.device("cpu"), _Counting(), None, log=lambda line: None)
    with forced("torch"):
        step(_batch(model, (300, 420), 0))
    (graph,) = step.graphs.values()
    ids = {id(t) for t in graph.inputs}
    assert len(forgotten) == 3 + 2 and all(id(t) in ids for t in forgotten)   # 3 neighbourhoods, 2 downs
    idx = torch.randint(0, 50, (40, 8))
    gather_backward.transpose(idx, 50)
    assert hasattr(idx, gather_backward._CACHE)
    gather_backward.forget_transposes([idx])
    assert not hasattr(idx, gather_backward._CACHE)


@pytest.mark.parametrize("change,why", [
    (dict(backbone="ptv3"), "model.backbone is ptv3"),
    (dict(place="model"), "data.hierarchy: model"),
    (dict(amp="fp16"), "fp16's loss scaler"),
    (dict(loss="ce_lovasz"), "train.loss ce_lovasz"),
])
def test_runs_graphs_cannot_take_say_why(change, why):
    """On CUDA (a device object: no GPU is touched), each configuration a graph cannot record is refused up
    front with its reason; the published one is not."""
    cfg, model, *_ = _pair()
    cuda = torch.device("cuda")
    assert graphs._not_graphable(cfg, model, cuda, "beside") is None
    cfg.model.backbone = change.get("backbone", cfg.model.backbone)
    cfg.train.amp = change.get("amp", cfg.train.amp)
    cfg.train.loss = change.get("loss", cfg.train.loss)
    assert why in graphs._not_graphable(cfg, model, cuda, change.get("place", "loader"))


def test_a_graphed_step_runs_the_third_norm_on_the_plain_kernel_by_default(monkeypatch, kernel_failures_forgotten):
    """``POINTGEOPE_KERNELS`` unset and the norms' kernels decided as on CUDA (the CPU standing in, under Triton's
    interpreter: ``cpu_as_cuda``): the recorded padded step runs every block's third norm on the plain kernel over
    its real prefix, twice (the recording and its replay), and no torch-ops prefix batch norm; the graphed learner
    ends where the eager learner on torch's path does (loss, logits, parameters, running buffers, momentum)."""
    pytest.importorskip("triton")       # imported before TRITON_INTERPRET is set (test_fused_attention.py says why)
    from pointgeope.model import norm
    from tests.model.test_norm_plain import cpu_as_cuda

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.delenv("POINTGEOPE_KERNELS", raising=False)
    cpu_as_cuda(monkeypatch)
    # every stage's clouds at least as many points as its neighbours (8 at the second stage: 17 and 22 points
    # there), and two row blocks of the plain kernel's tile at the first: the interpreter's time goes with the
    # rows. With fewer points than neighbours in every cloud of a stage (SMALL's 16 at its third stage: 4 and 5
    # points), each cloud's neighbours
    # repeat cyclically, the displacements cancel, and the pair MLP's batch norm puts every self pair (p_i - p_i)
    # at 0 before its ReLU (bias 0 at initialisation): relu' there is decided by rounding, so the padded and the
    # eager step may take different subgradients (`linear_p.1.bias`; measured: 36 of 144 rows within 1e-12 of 0)
    # Two stages (each with an encoder and a decoder block: four third norms) rather than SMALL's three: the
    # interpreter's time goes with the launches too, and a third stage checks no other norm
    cfg, model, learner, twin, twin_learner = _pair(planes=(8, 16), blocks=(1, 1), decoder_blocks=(1, 1),
                                                    strides=(1, 4), neighbours=(8, 8))
    cpu, plain_calls = torch.device("cpu"), []
    fused = norm.PLAIN_KERNEL.triton
    monkeypatch.setattr(norm.PLAIN_KERNEL, "triton", lambda *a: plain_calls.append(a[8]) or fused(*a))
    monkeypatch.setattr(norm, "prefix_batch_norm", lambda *a: pytest.fail("the torch ops' prefix batch norm ran"))
    step = graphs.GraphedStep(cfg, learner, model, cpu, _Counting(), None, log=lambda line: None)
    batch = _batch(model, (70, 90), 0)
    logits, loss = step(batch)
    thirds = sum(isinstance(m, norm.BatchNorm) and not m.relu for m in model.modules())   # the blocks' third
    assert len(plain_calls) == 2 * thirds and all(v is not None for v in plain_calls) and thirds >= 4
    with forced("torch"):
        want_logits, want = train_step(cfg, twin_learner, twin, batch, cpu)
    assert loss == pytest.approx(want, rel=1e-10)
    torch.testing.assert_close(logits, want_logits, rtol=1e-8, atol=1e-9)
    for (name, a), b in zip(model.state_dict().items(), twin.state_dict().values(), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-10, msg=name)
    for a, b in zip(learner.optimizer.state.values(), twin_learner.optimizer.state.values(), strict=True):
        torch.testing.assert_close(a["momentum_buffer"], b["momentum_buffer"], rtol=1e-8, atol=1e-10)
