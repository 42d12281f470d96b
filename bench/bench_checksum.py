"""Benchmark: what a checksum costs ``prepare`` and ``predict`` (``pointgeope.checksum.file_checksum``: sha256
of a file read in 8 MiB blocks) per 100 MB, beside bare ``hashlib.sha256`` of the same bytes in memory (the
floor: hashing alone, no read).

The file (``--mb`` MB of random bytes) is written into a temporary folder and read once before the timing, so
it is in the page cache, as a scan just written or read is: a file read from a cold disk adds the disk's time.
The two are interleaved (``bench/interleave.py``: ``--reps`` rounds, rotated), one thread (hashlib's sha256 is
single-threaded). Seconds per 100 MB = the median round's seconds x 100 / ``--mb``; GB/s likewise.

Usage: python bench/bench_checksum.py [--mb 100] [--reps 5] [--out bench/results/bench_checksum.json]
"""
from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import tempfile
from pathlib import Path

import interleave
from bench_io import out_path, provenance, save_json
from pointgeope.checksum import file_checksum

RESULTS = Path(__file__).resolve().parent / "results" / "bench_checksum.json"


def per_100mb(seconds: list[float], mb: float) -> dict:
    """The median and fastest of ``seconds`` (one hash of ``mb`` MB each) scaled to 100 MB, and the median's
    rate in GB/s (1 GB = 1000 MB)."""
    median = statistics.median(seconds)
    return {"seconds_per_100mb": round(median * 100 / mb, 4), "fastest_per_100mb": round(min(seconds) * 100 / mb, 4),
            "gb_per_s": round(mb / 1000 / median, 3)}


def run(mb: int, reps: int) -> dict:
    """``file_checksum`` of a ``mb`` MB file and ``sha256`` of its bytes in memory, interleaved: their per-100-MB
    figures (:func:`per_100mb`) and raw wall seconds per round."""
    data = os.urandom(mb * 1_000_000)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scan.bin"
        path.write_bytes(data)
        if file_checksum(path) != f"sha256:{hashlib.sha256(data).hexdigest()}":  # and the file is cached now
            raise SystemExit("file_checksum differs from sha256 of the file's bytes")
        fns = {"file_checksum": lambda: file_checksum(path), "sha256_in_memory": lambda: hashlib.sha256(data)}
        with interleave.threads(1):
            _, wall, _ = interleave.rounds(fns, reps, warmup=0)
    return {name: {**per_100mb(times, mb), "seconds": times} for name, times in wall.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=100, help="the file's size in MB (default 100)")
    parser.add_argument("--reps", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--out", type=Path, help=f"results JSON (default bench/results/{RESULTS.name}; under "
                                                 "100 MB: a temporary file)")
    args = parser.parse_args()
    out = out_path(args.out, RESULTS, smoke=args.mb < 100)
    result = {"mb": args.mb, "reps": args.reps, "provenance": provenance(1, ()),
              "time": "wall seconds per call, the file in the page cache; per 100 MB: the median round x 100 / mb",
              **run(args.mb, args.reps), "load_average_1min_end": os.getloadavg()[0]}
    save_json(out, result, indent=1)
    for name in ("file_checksum", "sha256_in_memory"):
        print(f"{name:<17} {result[name]['seconds_per_100mb']:.3f} s per 100 MB ({result[name]['gb_per_s']} GB/s)")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
