"""Benchmark: the training step eager against the same step as a CUDA graph (``train.cuda_graphs``,
``engine/graphs.py``), with the hierarchy given, per positional encoding and precision, and the padded step's third
batch norm on its two paths.

For ``--clouds`` synthetic rooms of ``--points`` points (``bench_train_step.make_inputs``), every preset x
``--amps`` case builds identical models (seed 0) with SGD: one takes ``engine.step.train_step`` (eager), the
others ``graphs.GraphedStep`` (its batch padded, recorded once, replayed). The padded step's blocks' third norm
(``norm.BatchNorm``, no ReLU) runs on two paths, each a graph and a padded eager step: on the plain Triton kernel
(``norm.PLAIN_KERNEL``, the CUDA default inside a padded batch: 2 passes over the rows forward, 3 backward) and,
as before that default, on the torch ops' prefix statistics (``prefix_norm.prefix_batch_norm``, about 11 and 15:
``third_norm("prefix_ops")`` makes the kernel opt-in for those steps, as its registration was). The two graphs
of a case share one memory pool and capture stream (``graphs.CudaRecorder``, as a run's graphs of several sizes
do). The cases run one after the other, and each frees its graphs and their pool before the next is recorded (a
pool keeps one step's activations: at 16 x 80k two float32 and two bf16 pools would hold about 155 GiB); within
a case every side's steps are interleaved. Reported per case (``prefix_ops_``: the same of the graph on the
torch ops' prefix statistics):

    agree        from the same weights, one step of each on the same batch: the relative difference of the
                 losses and the largest difference of the real rows' logits (float32: rounding only)
    record_s     the first graphed step: 3 warm-up passes, the capture and the first replay
    graph_mib    memory allocated after the first graphed step above the level before it (the graph's inputs,
                 outputs, gradients and momentum), measured before the eager twin's step
    graph_reserved_mib   the same for the memory the allocator holds: with the graph's pool, which keeps one
                 step's activations while the graph lives (the cost of a graph; the second graph of a case reuses
                 the pool, so its figure is about its outputs)
    eager_peak_mib, graph_peak_mib, ...   a step's peak ``max_memory_allocated`` above the level before it
    eager_s, graph_s, ratio   a step's wall time (``kernel_check.timed``, minimum over ``reps`` rounds, every side
                 interleaved) and graph / eager
    reserved_before_mib   (CUDA) the memory the allocator holds as the case starts (the earlier cases' pools
                 released: about the inputs' size)
    reps         the rounds timed (``--budget`` may stop a case after its first)
    padded_eager_s, padded_ratio   the padded step run eagerly (``RerunRecorder`` on every device: the padding
                 and the padded batch norm without a graph) and its ratio to eager, which separates what
                 padding costs from what the graph saves (run 6: graphed steps took 1.3-1.5x the eager step)
    graph_prefix_ops_s, padded_eager_prefix_ops_s, prefix_ops_ratio, padded_prefix_ops_ratio   the same with the
                 third norm on the torch ops' prefix statistics
    graph_vs_prefix_ops, padded_vs_prefix_ops   graph_s / graph_prefix_ops_s and padded_eager_s /
                 padded_eager_prefix_ops_s: below 1 the plain kernel pays in a padded step
    third_norm_ran   the paths the plain kernel's calls took in the case (``triton`` on CUDA; ``torch`` after a
                 fallback; none on the CPU, where the third norm takes the torch ops on both sides)

On the CPU (the test suite) the graph is ``RerunRecorder``'s stand-in, so only the bookkeeping is timed.

Usage: python bench/bench_graphs.py --out result.json [--device cuda] [--points 80000] [--clouds 2]
       [--presets rpe geope] [--amps none bf16] [--reps 5] [--warmup 2] [--budget 120]
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_io import save_json
from bench_train_step import Case, make_inputs, timed
from gpu_record import run_record
from pointgeope.engine import graphs
from pointgeope.engine.step import train_step
from pointgeope.model import PointTransformerSeg, norm
from step_profile import sync

THIRD_NORMS = ("kernel", "prefix_ops")   # the padded step's third norm: the plain kernel (the default), torch ops


@contextlib.contextmanager
def third_norm(path: str) -> Iterator[None]:
    """Inside, a padded step's third norm (``norm.BatchNorm``) runs on ``path``: ``"kernel"``, the plain kernel where
    it is the default (CUDA, ``POINTGEOPE_KERNELS`` unset: inside a padded batch), or ``"prefix_ops"``, the torch
    ops' prefix statistics, as before that default (``norm.PLAIN_KERNEL`` opt-in, its former registration)."""
    if path not in THIRD_NORMS:
        raise ValueError(f"expected a third norm's path in {THIRD_NORMS}, got {path!r}")
    kernel = norm.PLAIN_KERNEL
    default = kernel.cuda_default
    kernel.cuda_default = default if path == "kernel" else False
    try:
        yield
    finally:
        kernel.cuda_default = default


class GraphCase(Case):
    """A :class:`Case` whose steps go through ``graphs.GraphedStep`` (the given-hierarchy batch); ``rerun``: with
    ``RerunRecorder`` on every device, so the padded step runs eagerly (what padding costs without a graph);
    ``third``: the path of the padded step's third norm (:func:`third_norm`); ``recorder``: a CUDA graph's recorder
    shared with another case (one memory pool), else one of its own."""

    def __init__(self, preset: str, inputs: dict, amp: str, device: torch.device, rerun: bool = False,
                 third: str = "kernel", recorder: graphs.CudaRecorder | None = None):
        super().__init__(preset, inputs, amp, device)
        cuda = device.type == "cuda" and not rerun
        if not cuda:
            recorder = graphs.RerunRecorder()
        elif recorder is None:
            recorder = graphs.CudaRecorder(device)
        self.lines: list[str] = []
        self.third = third
        self.graphed = graphs.GraphedStep(self.cfg, self.learner, self.model, device, recorder,
                                          lambda b, u=None: train_step(self.cfg, self.learner, self.model, b,
                                                                       device, u),
                                          self.lines.append)

    def _train(self, batch) -> float:
        return self.first(batch)[1]

    def first(self, batch) -> tuple[torch.Tensor, float]:
        """One graphed step (the first records the graph) with the third norm on this case's path: (logits, loss)."""
        with third_norm(self.third):
            return self.graphed(batch)


def _first_graphed(graphed: GraphCase, batch) -> tuple[torch.Tensor, float, dict]:
    """The first graphed step (which records the graph): its logits, loss, seconds and memory."""
    cuda = graphed.device.type == "cuda"
    before = (torch.cuda.memory_allocated(), torch.cuda.memory_reserved()) if cuda else (0, 0)
    start = time.perf_counter()
    logits, loss = graphed.first(batch)
    sync(graphed.device)
    record_s = time.perf_counter() - start
    after = (torch.cuda.memory_allocated(), torch.cuda.memory_reserved()) if cuda else (0, 0)
    return logits, loss, {"record_s": record_s, "recorded": len(graphed.graphed.graphs), "log": graphed.lines,
                          "graph_mib": (after[0] - before[0]) / 2**20,
                          "graph_reserved_mib": (after[1] - before[1]) / 2**20}


def agreement(eager: Case, graphed: GraphCase, prefix_ops: GraphCase | None = None) -> dict:
    """One step of each from the same weights on the same batch (the first, which also records each graph): the
    graph with the third norm on the kernel, and (``prefix_ops_``) the one on the torch ops' prefix statistics."""
    batch = eager.batches[True]
    firsts = {"": _first_graphed(graphed, batch)}
    if prefix_ops is not None:
        firsts["prefix_ops_"] = _first_graphed(prefix_ops, batch)
    logits_e, loss_e = train_step(eager.cfg, eager.learner, eager.model, batch, eager.device)
    row = {}
    for prefix, (logits, loss, recording) in firsts.items():
        diff = (logits.detach().float() - logits_e.detach().float()).abs().max()
        row.update({f"{prefix}loss_rel_diff": abs(loss - loss_e) / abs(loss_e), f"{prefix}logits_max_diff": float(diff),
                    **{f"{prefix}{key}": value for key, value in recording.items()}})
    return row


def measure(args, pe: str, amp: str, inputs: dict, row: dict, until: float, write) -> None:
    """One preset x precision into ``row``: the eager case, the graphed cases with the third norm on the kernel and
    on the torch ops (one pool), their agreement (which records the graphs), the padded eager cases, ``--warmup``
    steps of each, then ``--reps`` rounds of every side interleaved (no new round after ``until``, the first always
    runs)."""
    device = torch.device(args.device)
    shared = graphs.CudaRecorder(device) if device.type == "cuda" else None
    norm.PLAIN_KERNEL.ran.clear()
    eager = Case(pe, inputs, amp, device)
    graphed = GraphCase(pe, inputs, amp, device, recorder=shared)
    prefix_ops = GraphCase(pe, inputs, amp, device, third="prefix_ops", recorder=shared)
    row.update(agreement(eager, graphed, prefix_ops))
    write()
    cases = {"eager": eager, "graph": graphed, "graph_prefix_ops": prefix_ops,
             "padded_eager": GraphCase(pe, inputs, amp, device, rerun=True),
             "padded_eager_prefix_ops": GraphCase(pe, inputs, amp, device, rerun=True, third="prefix_ops")}
    for _ in range(args.warmup):
        for case in cases.values():
            case.step(True)
    for rep in range(args.reps):
        if rep and time.perf_counter() > until:
            break
        for key, case in cases.items():
            seconds, peak = timed(lambda c=case: c.step(True), device)
            row[f"{key}_s"] = min(row.get(f"{key}_s", float("inf")), seconds)
            row[f"{key}_peak_mib"] = max(row.get(f"{key}_peak_mib", 0.0), peak)
        row.update(reps=rep + 1, ratio=row["graph_s"] / row["eager_s"],
                   padded_ratio=row["padded_eager_s"] / row["eager_s"],
                   prefix_ops_ratio=row["graph_prefix_ops_s"] / row["eager_s"],
                   padded_prefix_ops_ratio=row["padded_eager_prefix_ops_s"] / row["eager_s"],
                   graph_vs_prefix_ops=row["graph_s"] / row["graph_prefix_ops_s"],
                   padded_vs_prefix_ops=row["padded_eager_s"] / row["padded_eager_prefix_ops_s"],
                   third_norm_ran=sorted(norm.PLAIN_KERNEL.ran))
        write()


def release(device: torch.device) -> None:
    """Free what a finished case held before the next is built: the cycles (a ``GraphCase``'s step closes over the
    case), then on CUDA the allocator's cached blocks, the graph's private pool among them once no graph refers to
    it (16 x 80k float32: a pool of about an eager step's 51 GiB; four at once would not fit an H200)."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()


def run(args, out: dict, write) -> None:
    """Every preset x precision in turn (:func:`measure`), each freed (:func:`release`) before the next is recorded;
    case ``i`` of ``n`` starts no round beyond its first after ``--budget x (i + 1) / n`` seconds."""
    device = torch.device(args.device)
    inputs = make_inputs(args.points, args.clouds, device, PointTransformerSeg().hierarchy_spec)
    out.update(points_per_cloud=args.points, clouds=args.clouds, cases={})
    names = [(pe, amp) for pe in args.presets for amp in args.amps]
    start = time.perf_counter()
    for i, (pe, amp) in enumerate(names):
        row = out["cases"][f"{pe}/{amp}"] = {}
        if device.type == "cuda":                 # the previous cases' pools released: back to the inputs' level
            row["reserved_before_mib"] = torch.cuda.memory_reserved(device) / 2**20
        measure(args, pe, amp, inputs, row, start + args.budget * (i + 1) / len(names), write)
        release(device)
        print(f"{pe + '/' + amp:<12} eager {row['eager_s'] * 1e3:8.1f} ms  graph {row['graph_s'] * 1e3:8.1f} ms  "
              f"padded eager {row['padded_eager_s'] * 1e3:8.1f} ms  "
              f"x{row['ratio']:.3f}  record {row['record_s']:.1f} s  {row['graph_mib']:.0f} MiB  "
              f"loss diff {row['loss_rel_diff']:.1e}; third norm on torch ops: graph "
              f"{row['graph_prefix_ops_s'] * 1e3:8.1f} ms, padded eager {row['padded_eager_prefix_ops_s'] * 1e3:8.1f} "
              f"ms (kernel / ops x{row['graph_vs_prefix_ops']:.3f}, x{row['padded_vs_prefix_ops']:.3f})", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--out", type=Path, required=True)
    add("--device", default="cuda")
    add("--points", type=int, default=80_000)
    add("--clouds", type=int, default=2)
    add("--presets", nargs="+", default=["rpe", "geope"])
    add("--amps", nargs="+", choices=("none", "bf16"), default=["none", "bf16"])
    add("--reps", type=int, default=5)
    add("--warmup", type=int, default=2)
    add("--budget", type=float, default=120.0,
        help="seconds of all cases after the inputs, shared in turn: case i of n starts no new rep after budget x "
             "(i+1)/n")
    args = parser.parse_args()
    out = {"device": args.device, "run": run_record(args.device), "torch_threads": torch.get_num_threads(),
           "time": "wall seconds of one training step (SGD), minimum over reps, eager, graphed and padded eager "
                   "(the padded step's third norm on the plain kernel, and on the torch ops' prefix statistics: "
                   "_prefix_ops) interleaved within each case; one case at a time, its graphs freed before the next"}
    run(args, out, lambda: save_json(args.out, out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
