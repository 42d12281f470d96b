"""Benchmark: one attention layer's CPU time with the pointgeope found on ``PYTHONPATH``, for before/after runs.

Issue 20 added the Triton path to ``PointTransformerLayer``; the CPU keeps torch's kernels, and this checks
that it pays nothing for the new branch. Run it alternately against two source trees (``PYTHONPATH=<tree>``),
interleaved, and compare: per preset, a training step (forward + backward, train mode) and inference (eval,
no grad) of one layer (C = 64, k = 16, share_planes 8, a synthetic room of ``--points`` points, as
``bench_model.py``'s layer), minimum over ``--reps`` of the process CPU time (``time.process_time``). The
JSON's provenance names the commit and dirty flag of the tree on ``PYTHONPATH`` (the code timed).

Usage: PYTHONPATH=TREE python bench/bench_cpu_paths.py --label after --threads 1 --out result.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from pointgeope.model.attention import PointTransformerLayer
from pointgeope.model.ops import knn
from pointgeope.provenance import PACKAGE_PARENT

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_io import provenance, save_json
from bench_model import synthetic_room


def cpu_seconds(fn, reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        start = time.process_time()
        fn()
        best = min(best, time.process_time() - start)
    return best


def measure(preset: str, coord: torch.Tensor, idx: torch.Tensor, reps: int) -> dict:
    torch.manual_seed(0)
    layer = PointTransformerLayer(64, share_planes=8, neighbours=16, pe=preset)
    feat = torch.randn(coord.shape[0], 64)

    def train():
        x = feat.clone().requires_grad_()
        layer.train()(coord, x, idx).square().mean().backward()

    def infer():
        with torch.no_grad():
            layer.eval()(coord, feat, idx)

    train()
    return {"train_s": cpu_seconds(train, reps), "infer_s": cpu_seconds(infer, reps)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", required=True)
    parser.add_argument("--points", type=int, default=16_000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--presets", nargs="+", default=["rpe", "geope", "lingeope"])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    coord = synthetic_room(args.points, seed=1)
    offset = torch.tensor([coord.shape[0]])
    idx, _ = knn(coord, coord, 16, offset, offset)
    out = {"label": args.label, "source": str(PACKAGE_PARENT / "pointgeope"), "threads": args.threads,
           "provenance": provenance(args.threads, ("numpy", "torch"), tree=PACKAGE_PARENT),
           "points": int(coord.shape[0]), "time": "process CPU seconds, minimum over reps", "presets": {}}
    for preset in args.presets:
        out["presets"][preset] = measure(preset, coord, idx, args.reps)
    save_json(args.out, out, indent=1)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
