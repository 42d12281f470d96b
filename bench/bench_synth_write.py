"""Benchmark: writing ``x y z r g b`` lines of a synthetic room, vectorised formatter vs the usual ways.

Methods, on the same random room (coordinates in millimetres, as ``pointgeope synth`` holds them):

    savetxt    np.savetxt(fmt="%.3f %.3f %.3f %d %d %d")            (the baseline)
    percent    one "%" format of the whole room over a tuple of Python numbers
    vectorised data_prep.synth.write.format_lines: digits computed with numpy, padding bytes dropped

Each is checked to give the same bytes as the baseline; then the three are interleaved (``bench/interleave.py``:
``--reps`` rounds, each formatting the room into memory once per method, in a rotated order), at one thread.
All three are single-threaded numpy and Python, whatever the thread setting, so the default times one thread
only: a 2-thread row (``--threads 1 2``) would be the same code beside a second core, which a reader takes
for a 2-thread figure (the committed run's 2-thread row, 10.0x against 7.5x at one thread, differs by the
machine's noise alone); the JSON's ``threads_note`` says so. A
method's speed-up is savetxt's time over its time in the same round (paired): the median and range of those
ratios, wall clock and CPU time of this process (the machine may be shared; the provenance records the
commit, dirty flag, numpy's version and the load average). Results go to ``--out``
(default bench/results/bench_synth_write.json; a run of fewer than 1M points writes a temporary file).

Usage: python bench/bench_synth_write.py [--points 1000000] [--reps 3] [--threads 1] [--out FILE]
"""
from __future__ import annotations

import argparse
import io
import os
from pathlib import Path

import numpy as np

import interleave
from bench_io import out_path, provenance, save_json
from data_prep.synth.write import format_lines
from pointgeope.plural import counted

RESULTS = Path(__file__).resolve().parent / "results" / "bench_synth_write.json"
FMT = "%.3f %.3f %.3f %d %d %d"
THREADS_NOTE = ("one thread by default: the three are single-threaded code (numpy formatting, Python's % "
                "format), so a 2-thread row would be the same code beside a second core, its difference from "
                "the 1-thread row the machine's noise, not a 2-thread speed-up")


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
    rows = [(*c, *k) for c, k in zip((xyz_mm / 1000.0).tolist(), rgb.tolist(), strict=True)]
    return ((FMT + "\n") * len(rows) % tuple(v for row in rows for v in row)).encode()


def vectorised(xyz_mm, rgb) -> bytes:
    return format_lines(xyz_mm, rgb)[0]


METHODS = {"savetxt": savetxt, "percent": percent, "vectorised": vectorised}


def run(xyz_mm, rgb, reference: bytes, reps: int) -> dict[str, dict[str, list[float]]]:
    """The three ways interleaved over ``reps`` rounds (one warm-up call each, whose bytes are checked
    against ``reference``): ``{"wall": {method: seconds per round}, "cpu": {...}}``."""
    fns = {name: (lambda fn=fn: fn(xyz_mm, rgb)) for name, fn in METHODS.items()}
    for name, fn in fns.items():
        if fn() != reference:
            raise SystemExit(f"{name} does not give the bytes of np.savetxt")
    _, wall, cpu = interleave.rounds(fns, reps, warmup=0)
    return {"wall": wall, "cpu": cpu}


def speedup(times: dict[str, list[float]], name: str) -> dict:
    """savetxt's time over ``name``'s in each round (``t_savetxt[r] / t_name[r]``, :func:`interleave.paired`
    with ``name`` as the base, from the unrounded times): their median and range, and the ratio of the minima."""
    side = interleave.paired(times, base=name)["savetxt"]
    return {key: side[key] for key in ("paired_median", "paired_range", "ratio_of_mins")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=1_000_000)
    parser.add_argument("--reps", type=int, default=3, help="interleaved rounds")
    parser.add_argument("--threads", type=int, nargs="+", default=[1],
                        help="thread settings (default 1: the formatters are single-threaded code)")
    parser.add_argument("--out", type=Path, help=f"results JSON (default bench/results/{RESULTS.name}; "
                                                 "fewer than 1M points: a temporary file)")
    args = parser.parse_args()
    out = out_path(args.out, RESULTS, smoke=args.points < 1_000_000)
    xyz_mm, rgb = room(args.points)
    reference = savetxt(xyz_mm, rgb)
    result = {"points": args.points, "reps": args.reps, "bytes": len(reference),
              "provenance": provenance(args.threads, ("numpy",)),
              "threads_note": THREADS_NOTE,
              "time": "seconds of formatting the room into memory, the three ways interleaved (rotated) over reps "
                      "rounds; ratios are savetxt's time over the method's in the same round (paired): median, range",
              "runs": []}
    for threads in args.threads:
        with interleave.threads(threads):
            times = run(xyz_mm, rgb, reference, args.reps)
        rows = {}
        for name in METHODS:
            wall, cpu = min(times["wall"][name]), min(times["cpu"][name])
            rows[name] = {"seconds_min": wall, "cpu_seconds_min": cpu,
                          "speedup_vs_savetxt": speedup(times["wall"], name),
                          "cpu_speedup_vs_savetxt": speedup(times["cpu"], name),
                          "mpoints_per_s": args.points / wall / 1e6}
            sp, csp = rows[name]["speedup_vs_savetxt"], rows[name]["cpu_speedup_vs_savetxt"]
            print(f"{counted(threads, 'thread')} {name:<11} {wall:7.3f} s (cpu {cpu:.3f} s) "
                  f"{rows[name]['mpoints_per_s']:6.2f} Mpoints/s  x{sp['paired_median']:.1f} "
                  f"[{sp['paired_range'][0]:.1f}-{sp['paired_range'][1]:.1f}] vs savetxt "
                  f"(cpu x{csp['paired_median']:.1f})", flush=True)
        result["runs"].append({"threads": threads, "results": rows,
                               "paired": {clock: interleave.paired(t, "savetxt") for clock, t in times.items()}})
    result["load_average_1min_end"] = os.getloadavg()[0]
    save_json(out, result, indent=1)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
