"""The loader's collation of a training batch with and without its finite check of each sample's ``x``, interleaved.

``S3DISTrain`` checks every sample's ``x`` as it makes it (``data.sample_check``); the loader checked it again at
collation (``data.loader``), until it learnt to skip datasets that check their own samples
(``sample_check.checks_its_samples``). This times that second check's share: ``_CollateThen`` over ``--batch``
samples of ``--points`` points and 6 channels (a PTv1 recipe's block: 80k points of ``[xyz | rgb]``), its check
forced on (``checked``, what every batch paid before) and off (``skipped``, pointgeope's datasets now), paired per
round (``bench/interleave.py``), at 1 and 2 threads.

    python bench/bench_collate_check.py --out bench/results/bench_collate_check.json
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from torch_geometric.data import Data

from bench_io import ROOT, provenance, save_json
from interleave import paired, rounds, threads
from pointgeope.data.loader import _CollateThen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "bench_collate_check.json")
    parser.add_argument("--points", type=int, default=80_000)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--reps", type=int, default=30)
    args = parser.parse_args()
    run_provenance = provenance([1, 2], packages=("numpy", "torch", "torch_geometric"))
    g = torch.Generator().manual_seed(0)
    items = [Data(pos=torch.rand(args.points, 3, generator=g), x=torch.rand(args.points, 6, generator=g))
             for _ in range(args.batch)]
    checked, skipped = _CollateThen(items, None), _CollateThen(items, None)
    checked.check, skipped.check = True, False
    out = {"provenance": run_provenance, "points": args.points, "batch": args.batch, "reps": args.reps,
           "time": "seconds per collated batch (wall and process CPU), paired ratios to 'checked'", "threads": {}}
    for n in (1, 2):
        with threads(n):
            _, wall, cpu = rounds({"checked": lambda: checked(items), "skipped": lambda: skipped(items)}, args.reps)
        saved = [(a - b) / args.batch * 1e3 for a, b in zip(wall["checked"], wall["skipped"], strict=True)]
        out["threads"][str(n)] = {"wall": paired(wall, "checked"), "cpu": paired(cpu, "checked"),
                                  "check_ms_per_sample_median": round(sorted(saved)[len(saved) // 2], 4)}
    out["load_average_end"] = provenance(None)["load_average_1min"]
    save_json(args.out, out)
    print(json.dumps({n: {"check_ms_per_sample": t["check_ms_per_sample_median"],
                          "skipped_over_checked_wall": t["wall"]["skipped"]["paired_median"]}
                      for n, t in out["threads"].items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
