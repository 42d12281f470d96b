"""Benchmark: grid sampling (0.04 m) + crop to 80,000 points of a synthetic room, one core.

Rooms of 0.25M, 1M and 4M points (walls, floor, ceiling and furniture boxes of a 10 x 8 x 3 m room,
about 6 points per occupied voxel at 1M, like S3DIS). Per size it times, median over repetitions:

    ours       voxel_sample (sorted packed int64 keys, random point per voxel) + random_crop (argpartition)
    fragments  voxel_fragments: the test-time partition of the room into one-point-per-voxel fragments
    baseline   np.unique(grid, axis=0, return_index=True) on the integer voxel coordinates
               + the crop by a full np.argsort of the squared distances (PTv1's original crop)

and prints ms per call (wall and process CPU time) and the ratio baseline / ours of CPU time, measured in
the same run (on a shared machine the CPU time is the fairer one-core figure; the load average is saved). Results go to
bench/results/bench_voxelize.json.

Usage: python bench/bench_voxelize.py [--reps 5] [--sizes 250000 1000000 4000000]
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np
from bench_io import save_json

from pointgeope.data.fragments import voxel_fragments
from pointgeope.data.voxelize import random_crop, voxel_sample

RESULTS = Path(__file__).resolve().parent / "results" / "bench_voxelize.json"
GRID, VOXEL_MAX = 0.04, 80_000


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


def timed(fn, coord: np.ndarray, reps: int) -> tuple[float, float]:
    """Median (wall ms, process CPU ms) per call; CPU time is the one-core cost when the machine is
    shared (numpy runs these single-threaded)."""
    rng = np.random.default_rng(0)
    fn(coord, rng)                                      # warm-up
    wall, cpu = [], []
    for _ in range(reps):
        w, c = time.perf_counter(), time.process_time()
        fn(coord, rng)
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    return statistics.median(wall) * 1e3, statistics.median(cpu) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--sizes", type=int, nargs="+", default=[250_000, 1_000_000, 4_000_000])
    args = parser.parse_args()

    rows = []
    print("ms per call, wall / CPU (one core)")
    print(f"{'points':>9} {'voxels':>8} {'ours':>15} {'fragments':>15} {'baseline':>17} {'speed-up (CPU)':>15}")
    for n in args.sizes:
        coord = synthetic_room(n)
        voxels = voxel_sample(coord, GRID, np.random.default_rng(0)).shape[0]
        t_ours = timed(ours, coord, args.reps)
        t_frag = timed(lambda c, r: voxel_fragments(c, GRID, r), coord, max(1, args.reps // 2))
        t_base = timed(baseline, coord, max(1, args.reps // 3))
        speedup = t_base[1] / t_ours[1]
        rows.append({"points": n, "voxels": voxels,
                     "ours_ms": {"wall": round(t_ours[0], 2), "cpu": round(t_ours[1], 2)},
                     "fragments_ms": {"wall": round(t_frag[0], 2), "cpu": round(t_frag[1], 2)},
                     "baseline_ms": {"wall": round(t_base[0], 2), "cpu": round(t_base[1], 2)},
                     "speedup_cpu": round(speedup, 2)})
        print(f"{n:>9} {voxels:>8} {t_ours[0]:>7.1f}/{t_ours[1]:<7.1f} {t_frag[0]:>7.1f}/{t_frag[1]:<7.1f} "
              f"{t_base[0]:>8.1f}/{t_base[1]:<8.1f} {speedup:>14.1f}x")

    result = {
        "benchmark": "bench_voxelize", "grid_size": GRID, "voxel_max": VOXEL_MAX, "reps": args.reps,
        "machine": {"platform": platform.platform(), "processor": platform.processor(),
                    "cpu_count": os.cpu_count(), "numpy": np.__version__,
                    "load_avg_1min": os.getloadavg()[0]},
        "baseline": "np.unique(grid, axis=0, return_index=True) + full argsort crop",
        "rows": rows,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    save_json(RESULTS, result)
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
