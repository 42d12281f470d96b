"""Benchmark: the CPU point hierarchy (what a data loader worker builds) of this checkout against an older commit's,
in alternating processes.

``--base-ref`` (a commit of this repository) is unpacked with ``git archive`` into a temporary folder; each round
starts one process per side (``PYTHONPATH`` the side's tree, the order alternating round by round), which builds
the hierarchy of PTv1's layout (``bench_hierarchy.STRIDES``, ``NEIGHBOURS``) of ``--clouds`` synthetic rooms of
``--points`` points (``bench_model.synthetic_room``) once untimed (numba's compile or cache load) and then
``--calls`` times, and reports the least process CPU time of one hierarchy and a SHA-256 of every tensor of it.
A side's time is the minimum over the rounds, beside the median and range of its per-round ratios to the base
(paired); ``identical`` says whether every round of both sides hashed the same (bit for bit). Each side's process
must import the package from its own tree (else both would time one code: the run stops). ``OMP_NUM_THREADS``
and torch's threads are ``--threads`` in the children (pykdtree's pool is OpenMP's; numba's kernels here run on
one thread). The JSON carries ``bench_io.provenance`` (this checkout's commit, package versions, the load average
at the start) and the load average at the end of each case.

Usage: python bench/bench_hierarchy_checkouts.py --base-ref ee6d807 --out bench/results/x.json [--threads 1]
       [--clouds 1 16] [--rounds 4] [--calls 3]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))


def child(clouds: int, points: int, calls: int, threads: int) -> dict:
    """One side's figures for one batch (run in the side's process)."""
    import torch

    from bench_hierarchy import NEIGHBOURS, STRIDES, batch
    from pointgeope.model.ops import HierarchySpec

    torch.set_num_threads(threads)
    coord, offset = batch(clouds, points)
    spec = HierarchySpec(STRIDES, NEIGHBOURS)
    h = spec(coord, offset)
    seconds = []
    for _ in range(calls):
        start = time.process_time()
        h = spec(coord, offset)
        seconds.append(time.process_time() - start)
    digest = hashlib.sha256()
    for name in ("offsets", "samples", "down", "neighbours", "up", "up_dist2"):
        for t in getattr(h, name):
            digest.update(b"none" if t is None else f"{t.dtype}{tuple(t.shape)}".encode() + t.numpy().tobytes())
    import pointgeope
    return {"cpu_seconds": min(seconds), "sha256": digest.hexdigest(), "package": str(Path(pointgeope.__file__).parent)}


def run_side(tree: Path, clouds: int, args) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": str(args.threads)}
    code = (f"import sys; sys.path.insert(0, {str(ROOT / 'bench')!r}); import bench_hierarchy_checkouts as b, json; "
            f"print(json.dumps(b.child({clouds}, {args.points}, {args.calls}, {args.threads})))")
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tree, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def checked(row: dict, tree: Path) -> dict:
    """``row`` of a side whose process imported the package from ``tree``; else ``SystemExit`` naming both."""
    if not Path(row["package"]).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"expected the side of {tree} to import pointgeope from it, got {row['package']} "
                         "(an installed copy ahead of PYTHONPATH?): both sides would time one code")
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-ref", required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--clouds", type=int, nargs="+", default=[1, 16])
    parser.add_argument("--points", type=int, default=80_000)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--calls", type=int, default=3)
    args = parser.parse_args()
    import interleave
    from bench_io import provenance, save_json

    base_commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", args.base_ref], capture_output=True,
                                 text=True, check=True).stdout.strip()
    packages = ("numpy", "torch", "numba", "pykdtree")          # "new" is ROOT's package, whichever this imports
    result = {"base": base_commit, "provenance": provenance(args.threads, packages, tree=ROOT),
              "threads": args.threads, "points": args.points, "rounds": args.rounds, "calls": args.calls, "cases": {}}
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", base_commit], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        trees = {"base": Path(tmp), "new": ROOT}
        for clouds in args.clouds:
            rows = {side: [] for side in trees}
            for r in range(args.rounds):
                for side in (("base", "new") if r % 2 == 0 else ("new", "base")):
                    rows[side].append(checked(run_side(trees[side], clouds, args), trees[side]))
            times = {side: [row["cpu_seconds"] for row in rows[side]] for side in trees}
            paired = interleave.paired(times, "base")
            hashes = {row["sha256"] for side in trees for row in rows[side]}
            result["cases"][f"{clouds}x{args.points}"] = {
                side: {"cpu_seconds": paired[side]["min_s"], "all_cpu_seconds": times[side],
                       "paired_median": paired[side]["paired_median"], "paired_range": paired[side]["paired_range"]}
                for side in trees} | {"identical": len(hashes) == 1,
                                      "packages": sorted({row["package"] for side in trees for row in rows[side]}),
                                      "load_average_end": list(os.getloadavg())}
            save_json(args.out, result)
            print(json.dumps({f"{clouds}x{args.points}": result["cases"][f"{clouds}x{args.points}"]}), flush=True)


if __name__ == "__main__":
    main()
