"""Benchmark: the training step eager against the same step as a CUDA graph (``train.cuda_graphs``,
``engine/graphs.py``), with the hierarchy given, per positional encoding and precision.

For ``--clouds`` synthetic rooms of ``--points`` points (``bench_train_step.make_inputs``), every preset x
``--amps`` case builds two identical models (seed 0) with SGD: one takes ``engine.step.train_step`` (eager), the
other ``graphs.GraphedStep`` (its batch padded, recorded once, replayed). The cases run one after the other, and
each frees its graph and the graph's memory pool before the next is recorded (a pool keeps one step's
activations: at 16 x 80k two float32 and two bf16 pools would hold about 155 GiB); within a case eager and
graphed steps are interleaved. Reported per case:

    agree        from the same weights, one step of each on the same batch: the relative difference of the
                 losses and the largest difference of the real rows' logits (float32: rounding only)
    record_s     the first graphed step: 3 warm-up passes, the capture and the first replay
    graph_mib    memory allocated after the first graphed step above the level before it (the graph's inputs,
                 outputs, gradients and momentum), measured before the eager twin's step
    graph_reserved_mib   the same for the memory the allocator holds: with the graph's pool, which keeps one
                 step's activations while the graph lives (the cost of a graph)
    eager_peak_mib, graph_peak_mib   a step's peak ``max_memory_allocated`` above the level before it
    eager_s, graph_s, ratio   a step's wall time (``kernel_check.timed``, minimum over ``reps`` rounds, eager and
                 graphed interleaved) and graph / eager
    reserved_before_mib   (CUDA) the memory the allocator holds as the case starts (the earlier cases' pools
                 released: about the inputs' size)
    reps         the rounds timed (``--budget`` may stop a case after its first)
    padded_eager_s, padded_ratio   the padded step run eagerly (``RerunRecorder`` on every device: the padding
                 and the padded batch norm without a graph) and its ratio to eager, which separates what
                 padding costs from what the graph saves (run 6: graphed steps took 1.3-1.5x the eager step)

On the CPU (the test suite) the graph is ``RerunRecorder``'s stand-in, so only the bookkeeping is timed.

Usage: python bench/bench_graphs.py --out result.json [--device cuda] [--points 80000] [--clouds 2]
       [--presets rpe geope] [--amps none bf16] [--reps 5] [--warmup 2] [--budget 120]
"""
from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_io import save_json
from bench_train_step import Case, make_inputs, timed
from gpu_record import run_record
from pointgeope.engine import graphs
from pointgeope.engine.step import train_step
from pointgeope.model import PointTransformerSeg
from step_profile import sync


class GraphCase(Case):
    """A :class:`Case` whose steps go through ``graphs.GraphedStep`` (the given-hierarchy batch); ``rerun``: with
    ``RerunRecorder`` on every device, so the padded step runs eagerly (what padding costs without a graph)."""

    def __init__(self, preset: str, inputs: dict, amp: str, device: torch.device, rerun: bool = False):
        super().__init__(preset, inputs, amp, device)
        cuda = device.type == "cuda" and not rerun
        recorder = graphs.CudaRecorder(device) if cuda else graphs.RerunRecorder()
        self.lines: list[str] = []
        self.graphed = graphs.GraphedStep(self.cfg, self.learner, self.model, device, recorder,
                                          lambda b, u=None: train_step(self.cfg, self.learner, self.model, b,
                                                                       device, u),
                                          self.lines.append)

    def _train(self, batch) -> float:
        return self.graphed(batch)[1]


def agreement(eager: Case, graphed: GraphCase) -> dict:
    """One step of each from the same weights on the same batch (the first, which also records the graph)."""
    batch, cuda = eager.batches[True], graphed.device.type == "cuda"
    before = (torch.cuda.memory_allocated(), torch.cuda.memory_reserved()) if cuda else (0, 0)
    start = time.perf_counter()
    logits_g, loss_g = graphed.graphed(batch)
    sync(graphed.device)
    record_s = time.perf_counter() - start
    after = (torch.cuda.memory_allocated(), torch.cuda.memory_reserved()) if cuda else (0, 0)
    logits_e, loss_e = train_step(eager.cfg, eager.learner, eager.model, batch, eager.device)
    return {"loss_rel_diff": abs(loss_g - loss_e) / abs(loss_e),
            "logits_max_diff": float((logits_g.detach().float() - logits_e.detach().float()).abs().max()),
            "record_s": record_s, "recorded": len(graphed.graphed.graphs), "log": graphed.lines,
            "graph_mib": (after[0] - before[0]) / 2**20, "graph_reserved_mib": (after[1] - before[1]) / 2**20}


def measure(args, pe: str, amp: str, inputs: dict, row: dict, until: float, write) -> None:
    """One preset x precision into ``row``: the eager and the graphed case, their agreement (which records the
    graph), the padded case, ``--warmup`` steps of each, then ``--reps`` rounds of eager, graph, padded eager
    interleaved (no new round after ``until``, the first always runs)."""
    device = torch.device(args.device)
    eager, graphed = Case(pe, inputs, amp, device), GraphCase(pe, inputs, amp, device)
    row.update(agreement(eager, graphed))
    write()
    cases = {"eager": eager, "graph": graphed, "padded_eager": GraphCase(pe, inputs, amp, device, rerun=True)}
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
                   padded_ratio=row["padded_eager_s"] / row["eager_s"])
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
              f"loss diff {row['loss_rel_diff']:.1e}", flush=True)


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
                   "interleaved within each case; one case at a time, its graph freed before the next"}
    run(args, out, lambda: save_json(args.out, out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
