"""Benchmark: grid sampling (0.04 m) + crop to 80,000 points of a synthetic room, single-threaded code.

Rooms of 0.25M, 1M and 4M points (walls, floor, ceiling and furniture boxes of a 10 x 8 x 3 m room,
about 6 points per occupied voxel at 1M, like S3DIS). Per size and thread count it times:

    ours       voxel_sample (sorted packed int64 keys, random point per voxel) + random_crop (argpartition)
    fragments  voxel_fragments: the test-time partition of the room into one-point-per-voxel fragments
    baseline   np.unique(grid, axis=0, return_index=True) on the integer voxel coordinates
               + the crop by a full np.argsort of the squared distances (PTv1's original crop)

interleaved (``bench/interleave.py``: ``--reps`` rounds, each running the three once in a rotated order,
after one warm-up call each). It prints ms per call (process CPU time: on a shared machine the fairer
one-core figure) and the speed-up baseline / ours as the median and range of the per-round ratios (paired);
the JSON keeps wall time too, each side's minimum, and the run's provenance (commit, dirty flag, numpy and
numba versions, load average). All three run on one thread whatever the setting (numpy's sort and unique,
numba's serial radix sort), so the default times one thread only: a 2-thread row (``--threads 1 2``) would
be the same code beside a second core, which a reader takes for a 2-thread figure; the JSON's
``threads_note`` says so.

Usage: python bench/bench_voxelize.py [--reps 5] [--sizes 250000 1000000 4000000] [--threads 1]
       [--out bench/results/bench_voxelize.json] [--quick]
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np

import interleave
from bench_io import out_path, provenance, save_json
from pointgeope.data.fragments import voxel_fragments
from pointgeope.data.voxelize import random_crop, voxel_sample

RESULTS = Path(__file__).resolve().parent / "results" / "bench_voxelize.json"
GRID, VOXEL_MAX = 0.04, 80_000
THREADS_NOTE = ("one thread by default: the three are single-threaded code (numpy's sort and unique, numba's "
                "serial radix sort), so a 2-thread row would be the same code beside a second core, its "
                "difference from the 1-thread row the machine's noise, not a 2-thread speed-up")


def synthetic_room(n: int, seed: int = 0) -> np.ndarray:
    """``n`` points: 70% on the six faces of a 10 x 8 x 3 m box, 30% on the faces of 20 furniture boxes."""
    rng = np.random.default_rng(seed)
    size = np.array([10.0, 8.0, 3.0])
    lo = np.zeros((21, 3))
    hi = np.tile(size, (21, 1))
    lo[1:, :2] = rng.random((20, 2)) * (size[:2] - 2.0)
    hi[1:] = lo[1:] + np.column_stack([rng.uniform(0.4, 2.0, (20, 2)), rng.uniform(0.4, 2.0, 20)])
    box = np.where(rng.random(n) < 0.7, 0, rng.integers(1, 21, n))
    coord = lo[box] + rng.random((n, 3)) * (hi[box] - lo[box])
    axis, side = rng.integers(0, 3, n), rng.integers(0, 2, n)
    face = np.where(side == 1, hi[box, axis], lo[box, axis])
    coord[np.arange(n), axis] = face
    coord += rng.normal(0.0, 0.003, coord.shape)        # scanner noise
    return coord.astype(np.float32)


def ours(coord: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    keep = voxel_sample(coord, GRID, rng)
    return keep[random_crop(np.take(coord, keep, axis=0), VOXEL_MAX, rng)]


def baseline(coord: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    grid = np.floor((coord - coord.min(0)) / np.float32(GRID)).astype(np.int64)
    _, keep = np.unique(grid, axis=0, return_index=True)
    if keep.shape[0] > VOXEL_MAX:
        kept = np.take(coord, keep, axis=0)
        d2 = np.sum(np.square(kept - kept[rng.integers(keep.shape[0])]), axis=1)
        keep = keep[np.argsort(d2)[:VOXEL_MAX]]
    return keep


def case(coord: np.ndarray, reps: int) -> dict:
    """The three sides on ``coord``, interleaved over ``reps`` rounds after one warm-up call each: per clock
    (``cpu``: process time, the one-core cost on a shared machine; ``wall``) :func:`interleave.paired`
    against ``ours``, so ``baseline``'s ``paired_median`` is the speed-up (baseline / ours, per round)."""
    rngs = {name: np.random.default_rng(0) for name in ("ours", "fragments", "baseline")}
    fns = {"ours": lambda: ours(coord, rngs["ours"]),
           "fragments": lambda: voxel_fragments(coord, GRID, rngs["fragments"]),
           "baseline": lambda: baseline(coord, rngs["baseline"])}
    _, wall, cpu = interleave.rounds(fns, reps)
    return {"cpu": interleave.paired(cpu, "ours"), "wall": interleave.paired(wall, "ours")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--sizes", type=int, nargs="+", default=[250_000, 1_000_000, 4_000_000])
    parser.add_argument("--threads", type=int, nargs="+", default=[1],
                        help="thread settings (default 1: the three are single-threaded code)")
    parser.add_argument("--quick", action="store_true", help="250k points, 1 thread, 2 rounds (a smoke test)")
    parser.add_argument("--out", type=Path, help=f"results JSON (default {RESULTS.name} in bench/results; "
                                                 "--quick: a temporary file)")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.threads, args.reps = [250_000], [1], 2
    out = out_path(args.out, RESULTS, args.quick)
    result = {"benchmark": "bench_voxelize", "grid_size": GRID, "voxel_max": VOXEL_MAX, "reps": args.reps,
              "provenance": provenance(args.threads, ("numpy", "numba")),
              "threads_note": THREADS_NOTE,
              "baseline": "np.unique(grid, axis=0, return_index=True) + full argsort crop",
              "time": "seconds per call; ours, fragments and baseline interleaved (rotated) over reps rounds; "
                      "speed-up = baseline / ours per round (paired): each row's cpu.baseline (and wall.baseline) "
                      "paired_median and paired_range",
              "rows": []}
    print("ms per call (CPU, fastest round), speed-up = baseline / ours: paired median [range] of CPU time")
    print(f"{'threads':>7} {'points':>9} {'voxels':>8} {'ours':>8} {'fragments':>9} {'baseline':>9} {'speed-up':>22}")
    for threads in args.threads:
        with interleave.threads(threads):
            for n in args.sizes:
                coord = synthetic_room(n)
                voxels = voxel_sample(coord, GRID, np.random.default_rng(0)).shape[0]
                row = {"threads": threads, "points": n, "voxels": voxels, **case(coord, args.reps)}
                cpu = row["cpu"]
                result["rows"].append(row)
                save_json(out, result)
                sp = cpu["baseline"]                # baseline / ours per round: the speed-up
                print(f"{threads:>7} {n:>9} {voxels:>8} {1e3 * cpu['ours']['min_s']:>8.1f} "
                      f"{1e3 * cpu['fragments']['min_s']:>9.1f} {1e3 * cpu['baseline']['min_s']:>9.1f} "
                      f"{sp['paired_median']:>9.1f}x [{sp['paired_range'][0]:.1f}-{sp['paired_range'][1]:.1f}]",
                      flush=True)
    result["load_average_1min_end"] = os.getloadavg()[0]
    save_json(out, result)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
