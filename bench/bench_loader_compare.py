"""A loader worker's cost per training sample, this checkout against another (``--before``), interleaved;
or (``--workers-only``) this checkout's alone with ``--procs`` workers busy at once, and the seconds that many
workers take for one batch of ``--batch`` samples with ``data.hierarchy: loader`` (the GPU check's ``loader``).

Each round runs ``bench_train_step.py --loader-only`` (one thread: the block of an 80k-point sample from a
0.85M-point room, and its hierarchy) under each checkout in turn, as 1 process and as ``--procs`` processes
side by side (every core busy, as the loader's workers keep them). Medians per sample over the rounds.

    python bench/bench_loader_compare.py --before /tmp/old_checkout --out bench/results/bench_loader_hsv.json
    python bench/bench_loader_compare.py --workers-only --procs 8 --batch 16 --out loader.json
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from bench_io import OUTPUTS, ROOT, git_state, provenance, save_json


def one_run(tree: Path, procs: int, samples: int) -> list[dict]:
    """``procs`` processes of ``bench_train_step --loader-only`` under ``tree``, at once; their results."""
    inherited = os.environ.get("PYTHONPATH")                 # (the GPU check's wheels, after the tree)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree)] + ([inherited] if inherited else [])),
               OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as tmp:
        outs = [Path(tmp) / f"{i}.json" for i in range(procs)]
        jobs = [subprocess.Popen([sys.executable, str(tree / "bench" / "bench_train_step.py"), "--out", str(out),
                                  "--device", "cpu", "--loader-samples", str(samples), "--loader-only"],
                                 env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for out in outs]
        if any([job.wait() for job in jobs]):  # noqa: C419 - a list: every process waited for, failed or not
            raise RuntimeError(f"bench_train_step --loader-only failed under {tree}")
        return [json.loads(out.read_text())["loader_per_sample"] for out in outs]


def workers_only(args) -> dict:
    """``--procs`` workers of this checkout at once: the medians per sample (the first of each dropped) and
    ``batch_s``, what those workers take for a batch of ``--batch`` samples with their hierarchies."""
    run_provenance, block, hierarchy = provenance(1, tree=ROOT), [], []    # at the start: the code the workers import
    for run in one_run(ROOT, args.procs, args.samples):
        block += run["block_s"][1:]
        hierarchy += run["hierarchy_s"][1:]
    per_sample = float(np.median(block)) + float(np.median(hierarchy))
    return {"provenance": run_provenance, "procs": args.procs, "batch": args.batch,
            "block_median_s": round(float(np.median(block)), 4),
            "hierarchy_median_s": round(float(np.median(hierarchy)), 4),
            "batch_s": round(per_sample * args.batch / args.procs, 4),
            "time": "seconds per 80k-point sample, one thread per worker, all workers busy; batch_s = "
                    "(block + hierarchy) x batch / procs"}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, help="the other checkout (e.g. a git worktree)")
    parser.add_argument("--workers-only", action="store_true", help="this checkout alone (workers_only)")
    parser.add_argument("--batch", type=int, default=16, help="--workers-only: samples of one batch")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--samples", type=int, default=6, help="samples per process; the first (warm-up) is dropped")
    parser.add_argument("--procs", type=int, default=os.cpu_count())
    args = parser.parse_args()
    if args.workers_only:
        out = workers_only(args)
        save_json(args.out, out)
        print(json.dumps(out, indent=1))
        return 0
    if args.before is None:
        parser.error("--before is required (or --workers-only)")
    trees = {"before": args.before.resolve(), "after": ROOT}
    run_provenance, before = provenance(1, tree=ROOT), git_state(trees["before"], exclude=(OUTPUTS,))
    times = {(name, procs): {"block": [], "hierarchy": []} for name in trees for procs in sorted({1, args.procs})}
    for _ in range(args.rounds):
        for (name, procs), acc in times.items():
            for run in one_run(trees[name], procs, args.samples):
                acc["block"] += run["block_s"][1:]
                acc["hierarchy"] += run["hierarchy_s"][1:]
    out = {"provenance": run_provenance, "before": {"tree": str(trees["before"]), **before},
           "load_average_end": list(os.getloadavg()), "rounds": args.rounds, "samples_per_process": args.samples - 1,
           "time": "seconds per 80k-point sample, one thread per process, median over rounds and processes",
           "cases": {}}
    for (name, procs), acc in times.items():
        out["cases"][f"{name}_{procs}proc"] = {k: round(float(np.median(v)), 4) for k, v in acc.items()}
    for procs in sorted({1, args.procs}):
        before, after = out["cases"][f"before_{procs}proc"], out["cases"][f"after_{procs}proc"]
        out["cases"][f"after_over_before_{procs}proc"] = {k: round(after[k] / before[k], 3) for k in after}
    save_json(args.out, out)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
