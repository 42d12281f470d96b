"""Benchmark: the pure-torch kNN (``knn(..., backend="torch")``) of this tree against an earlier commit's, on the CPU.

The earlier ``pointgeope/model/ops/knn.py`` is read with ``git show REV:...`` and imported beside this tree's
(its imports are this tree's other modules; it registers its Triton kernel over this tree's, which a CPU run
of the ``torch`` backend never asks for, and the process ends with the run). Both time the same call,
``knn(coord, coord, k, offset, offset, backend="torch")`` on one cloud of ``--points`` points of
``bench_model.synthetic_room``, interleaved (``interleave.rounds``: round ``r`` runs the sides in rotated
order), per thread count; the result names the median of the paired ratios ``after / before`` and its range.
It also counts the rows where the two answers differ (the earlier one picked candidates from
``|q|^2 + |s|^2 - 2 q.s``).

Usage: python bench/bench_knn_torch.py --before REV --out bench/results/bench_knn_torch.json
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_io import module_at, provenance, save_json
from bench_model import synthetic_room
from interleave import paired, rounds, threads

KNN_PATH = "pointgeope/model/ops/knn.py"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="commit of the earlier knn.py")
    parser.add_argument("--points", type=int, default=80_000)
    parser.add_argument("-k", type=int, default=16)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    prov = provenance(args.threads)
    before = module_at(args.before, KNN_PATH, "knn_before")
    after = importlib.import_module("pointgeope.model.ops.knn")
    coord = synthetic_room(args.points, seed=1)
    offset = torch.tensor([coord.shape[0]])
    fns = {side: (lambda m=m: m.knn(coord, coord, args.k, offset, offset, backend="torch"))
           for side, m in (("before", before), ("after", after))}
    out = {"before": args.before, "points": args.points, "k": args.k, "reps": args.reps,
           "time": "wall seconds per call; paired ratios after / before of the same round",
           "provenance": prov, "runs": {}}
    for n in args.threads:
        with threads(n):
            last, wall, cpu = rounds(fns, args.reps, warmup=0)
        differ = (last["before"][0] != last["after"][0]).any(1)
        out["runs"][str(n)] = {"wall": paired(wall, "before"), "cpu": paired(cpu, "before"),
                               "rows_that_differ": int(differ.sum())}
        print(json.dumps({n: out["runs"][str(n)]}), flush=True)
    save_json(args.out, out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
