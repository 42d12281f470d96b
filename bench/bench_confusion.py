"""Benchmark: ``ConfusionMeter.update`` (the evaluation's count of a room's labels) against a bare ``bincount``.

An evaluation counts each test room's full-resolution predictions once (``engine/evaluate.py``:
``meter.update(pred (N,), label (N,))``, int64 on the CPU), up to millions of points a room. Timed sides,
on the same labels (13 classes, a share of ``ignore_index`` 255 points):

    update     the package's ``ConfusionMeter.update`` (shapes, dtypes and every kept label checked)
    bincount   the reference count without checks: ``bincount((target * C + pred)[target != 255], C * C)``,
               the pre-``4657a8e`` update's own counting, the floor that a checked count can approach
    at_<rev>   ``ConfusionMeter.update`` of ``pointgeope/metrics.py`` as it was at commit ``rev``, for each
               ``--revs`` (an earlier version timed beside today's in one run)

interleaved (``bench/interleave.py``: ``--reps`` rounds, each running both once in a rotated order, after
one warm-up call each), process CPU time (the fairer one-core figure on a shared machine) and wall time;
each side's ratio to bincount is the paired median and range of the per-round ratios. One thread (torch's
CPU kernels of these ops barely use a second; ``--threads 1 2`` times both). ``--label`` stores the run
under that name in ``--out``, keeping the others (a before / after pair in one file).

Usage: python bench/bench_confusion.py [--points 5000000] [--reps 7] [--threads 1] [--revs 4657a8e^ HEAD]
       [--label current]
       [--out bench/results/bench_confusion.json] [--quick]
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np
import torch

import interleave
from bench_io import module_at, out_path, provenance, save_json
from pointgeope.metrics import ConfusionMeter

RESULTS = Path(__file__).resolve().parent / "results" / "bench_confusion.json"
CLASSES, IGNORE = 13, 255


def labels(n: int, ignored: float = 0.05, right: float = 0.8, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """``(pred, target)`` int64 ``(n,)``: targets uniform over the classes, ``ignored`` of them 255; a
    prediction right with probability ``right``, else a uniform class."""
    rng = np.random.default_rng(seed)
    target = rng.integers(0, CLASSES, n)
    pred = np.where(rng.random(n) < right, target, rng.integers(0, CLASSES, n))
    target[rng.random(n) < ignored] = IGNORE
    return torch.from_numpy(pred), torch.from_numpy(target)


def bincount(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    keep = target != IGNORE
    return torch.bincount((target * CLASSES + pred)[keep], minlength=CLASSES * CLASSES)


def _update(meter_class, pred: torch.Tensor, target: torch.Tensor):
    """A call of ``meter_class(C, 255).update(pred, target)`` on a reset meter; checked first against
    :func:`bincount`."""
    meter = meter_class(CLASSES, IGNORE)
    meter.update(pred, target)
    assert np.array_equal(meter.confusion.ravel(), bincount(pred, target).numpy()), f"{meter_class} counts otherwise"

    def update():
        meter.reset()
        meter.update(pred, target)
    return update


def case(n: int, reps: int, others: dict) -> dict:
    """The sides on ``n`` points, interleaved (``others``: ``{name: ConfusionMeter class}`` of other versions)."""
    pred, target = labels(n)
    fns = {"bincount": lambda: bincount(pred, target), "update": _update(ConfusionMeter, pred, target)}
    fns.update({name: _update(meter, pred, target) for name, meter in others.items()})
    _, wall, cpu = interleave.rounds(fns, reps)
    return {"cpu": interleave.paired(cpu, "bincount"), "wall": interleave.paired(wall, "bincount")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=5_000_000)
    parser.add_argument("--reps", type=int, default=7, help="interleaved rounds")
    parser.add_argument("--threads", type=int, nargs="+", default=[1])
    parser.add_argument("--revs", nargs="*", default=[], help="commits whose ConfusionMeter.update is timed too")
    parser.add_argument("--label", default="current", help="the name this run is stored under in --out")
    parser.add_argument("--quick", action="store_true", help="200k points, 2 rounds (a smoke test)")
    parser.add_argument("--out", type=Path, help=f"results JSON (default {RESULTS.name} in bench/results; "
                                                 "--quick: a temporary file)")
    args = parser.parse_args()
    if args.quick:
        args.points, args.reps = 200_000, 2
    out = out_path(args.out, RESULTS, args.quick)
    result = json.loads(out.read_text()) if out.is_file() else {
        "benchmark": "bench_confusion", "classes": CLASSES, "ignore_index": IGNORE,
        "time": "seconds per call, update and bincount interleaved (rotated) over reps rounds; ratio = update / "
                "bincount per round (paired): each row's cpu.update paired_median and paired_range",
        "runs": {}}
    others = {f"at_{rev}": module_at(rev, "pointgeope/metrics.py", f"metrics_at_{i}").ConfusionMeter
              for i, rev in enumerate(args.revs)}
    run = {"points": args.points, "reps": args.reps, "provenance": provenance(args.threads), "rows": []}
    print(f"{args.label}: ms per call (CPU, fastest round); side / bincount: paired median [range] of CPU time")
    for threads in args.threads:
        with interleave.threads(threads):
            row = {"threads": threads, **case(args.points, args.reps, others)}
        run["rows"].append(row)
        cpu = row["cpu"]
        for name, side in cpu.items():
            low, high = side["paired_range"]
            print(f"threads {threads}: {name:>12} {1e3 * side['min_s']:7.1f} ms, / bincount "
                  f"{side['paired_median']:.2f} [{low:.2f}-{high:.2f}]", flush=True)
    run["load_average_1min_end"] = os.getloadavg()[0]
    result["runs"][args.label] = run
    save_json(out, result)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
