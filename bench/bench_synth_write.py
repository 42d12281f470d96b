"""Benchmark: writing ``x y z r g b`` lines of a synthetic room, vectorised formatter vs the usual ways.

Methods, on the same random room (coordinates in millimetres, as ``pointgeope synth`` holds them):

    savetxt    np.savetxt(fmt="%.3f %.3f %.3f %d %d %d")            (the baseline)
    percent    one "%" format of the whole room over a tuple of Python numbers
    vectorised data_prep.synth.write.format_lines: digits computed with numpy, padding bytes dropped

Each is checked to give the same bytes as the baseline; time is the median of a few runs of formatting
into memory (wall clock, and CPU time of this process, since the machine may be shared: the load average
is saved too). Ratios are against savetxt measured in the same run. Results go to
bench/results/bench_synth_write.json.

Usage: python bench/bench_synth_write.py [--points 1000000] [--reps 3]
"""
from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from data_prep.synth.write import format_lines

RESULTS = Path(__file__).resolve().parent / "results" / "bench_synth_write.json"
FMT = "%.3f %.3f %.3f %d %d %d"


def room(n: int) -> tuple[np.ndarray, np.ndarray]:
    """A random room of ``n`` points: int64 millimetres (N, 3) around a shifted origin, uint8 colours (N, 3)."""
    rng = np.random.default_rng(0)
    xyz_mm = rng.integers(-20_000, 40_000, size=(n, 3))
    xyz_mm[:, 2] = rng.integers(-5, 3_300, size=n)
    return xyz_mm, rng.integers(0, 256, size=(n, 3)).astype(np.uint8)


def savetxt(xyz_mm, rgb) -> bytes:
    table = np.concatenate([xyz_mm / 1000.0, rgb.astype(np.float64)], axis=1)
    buf = io.BytesIO()
    np.savetxt(buf, table, fmt=FMT)
    return buf.getvalue()


def percent(xyz_mm, rgb) -> bytes:
    rows = [(*c, *k) for c, k in zip((xyz_mm / 1000.0).tolist(), rgb.tolist())]
    return ((FMT + "\n") * len(rows) % tuple(v for row in rows for v in row)).encode()


def vectorised(xyz_mm, rgb) -> bytes:
    return format_lines(xyz_mm, rgb)[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    xyz_mm, rgb = room(args.points)
    reference = savetxt(xyz_mm, rgb)
    results = {}
    for name, fn in (("savetxt", savetxt), ("percent", percent), ("vectorised", vectorised)):
        times, cpu = [], []
        for _ in range(args.reps):
            start, start_cpu = time.perf_counter(), time.process_time()
            text = fn(xyz_mm, rgb)
            times.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
        if text != reference:
            raise SystemExit(f"{name} does not give the bytes of np.savetxt")
        results[name] = {"seconds": statistics.median(times), "cpu_seconds": statistics.median(cpu)}
    base = results["savetxt"]["seconds"]
    for name, row in results.items():
        row["speedup_vs_savetxt"] = base / row["seconds"]
        row["cpu_speedup_vs_savetxt"] = results["savetxt"]["cpu_seconds"] / row["cpu_seconds"]
        row["mpoints_per_s"] = args.points / row["seconds"] / 1e6
        print(f"{name:<11} {row['seconds']:7.3f} s (cpu {row['cpu_seconds']:.3f} s)  {row['mpoints_per_s']:6.2f} "
              f"Mpoints/s  x{row['speedup_vs_savetxt']:.1f} vs savetxt (cpu x{row['cpu_speedup_vs_savetxt']:.1f})")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"points": args.points, "reps": args.reps, "bytes": len(reference),
                                   "machine": platform.platform(), "cpus": os.cpu_count(),
                                   "load_average": os.getloadavg(),
                                   "results": results}, indent=1) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
