"""Benchmark: the bytes a training step of the network writes by copying, and what makes them.

A copy (``aten::copy_``, ``clone``, ``contiguous``) of an ``(N, k, C)`` pair tensor is a pass over the largest
tensors of the step, and on a GPU its time is set by memory bandwidth alone (the H100 profile of the published
16 x 80k step spent 43 ms of 390 ms in device-to-device copies, ``docs/gpu.md``). The profiler's record of one
training step (``PointTransformerSeg50``, hierarchy given, SGD, torch's kernels on the CPU) gives every copy
op, its input's bytes and the autograd node that ran it; this script sums them per node:

    CopySlices / AsStridedBackward0   autograd's copies of the base of a view written in place: the same on
                                      CUDA (the graph does not depend on the device)
    ViewBackward0, forward, ...       the others, by node (``forward`` outside the backward); on the CPU
                                      mostly the torch attention's ``einsum`` reshapes (on CUDA the fused
                                      kernels replace it) and ``addmm``'s copy of the bias into its output

The bytes grow linearly with the points (every stage's ``N * k * C``), so a small batch tells the share of a
large one. The time of these copies is not measured here (CPU memory bandwidth says nothing of a GPU's).

Usage: python bench/bench_step_copies.py --out result.json [--points 8000] [--clouds 2] [--presets rpe geope]
       [--label after]   (appends the run under ``label`` to ``--out``, keeping the others)
"""
from __future__ import annotations

import argparse
import collections
import json
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_io import provenance, save_json
from bench_model import synthetic_room
from bench_train_step import sgd_learner, step_batch
from pointgeope.engine.step import train_step
from pointgeope.model import PointTransformerSeg

COPIES = ("aten::copy_", "aten::clone", "aten::contiguous")
VIEW_COPIES = ("CopySlices", "AsStridedBackward0")


def _node(event) -> str:
    """The autograd node that ran ``event`` (its nearest ancestor named like one), or ``forward``."""
    parent = event.cpu_parent
    while parent is not None:
        name = parent.name.removeprefix("autograd::engine::evaluate_function: ")
        if parent.name.startswith("autograd::engine::evaluate_function: ") or name in VIEW_COPIES:
            return name.removeprefix("torch::autograd::")
        parent = parent.cpu_parent
    return "forward"


def _bytes(event) -> int:
    """Bytes of the op's first input (the destination of ``copy_``, the source of ``clone``), float32."""
    shape = event.input_shapes[0] if event.input_shapes else []
    count = 1
    for size in shape:
        count *= size
    return 4 * count if shape else 0


def step_copies(preset: str, points: int, clouds: int) -> dict:
    """Copy bytes of one training step (after one warm-up step), total and per autograd node."""
    torch.manual_seed(0)
    coord = torch.cat([synthetic_room(points, seed=10 + b) for b in range(clouds)])
    offset = torch.arange(1, clouds + 1) * points
    feat = torch.cat([torch.rand(coord.shape[0], 3), coord], dim=1)
    label = torch.randint(0, 13, (coord.shape[0],))
    model = PointTransformerSeg(pe=preset).train()
    hierarchy = model.hierarchy_spec(coord, offset)
    cfg, learner = sgd_learner(model, "none", torch.device("cpu"))
    batch = step_batch(coord, feat, offset, label, hierarchy)

    def step():  # the training loop's own step (engine.step.train_step)
        train_step(cfg, learner, model, batch, torch.device("cpu"))

    step()
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        step()
    by_node = collections.Counter()
    for event in prof.events():
        if event.name in COPIES and not (event.cpu_parent and event.cpu_parent.name in COPIES):
            by_node[_node(event)] += _bytes(event)
    total = sum(by_node.values())
    view = sum(by_node[name] for name in VIEW_COPIES)
    return {"copy_mb": total / 2**20, "view_copy_mb": view / 2**20,
            "by_node_mb": {k: round(v / 2**20, 2) for k, v in by_node.most_common()}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--points", type=int, default=8000)
    parser.add_argument("--clouds", type=int, default=2)
    parser.add_argument("--presets", nargs="+", default=["rpe", "geope"])
    parser.add_argument("--label", default="current")
    args = parser.parse_args()
    torch.set_num_threads(1)
    run = {"provenance": provenance(1), "points": args.points, "clouds": args.clouds,
           "presets": {pe: step_copies(pe, args.points, args.clouds) for pe in args.presets}}
    results = json.loads(args.out.read_text()) if args.out.exists() else {}
    results[args.label] = run
    save_json(args.out, results, indent=1)
    for pe, row in run["presets"].items():
        print(f"{args.label} {pe}: {row['copy_mb']:.1f} MB copied a step, {row['view_copy_mb']:.1f} MB of them "
              "through views written in place")
    return 0


if __name__ == "__main__":
    sys.exit(main())
