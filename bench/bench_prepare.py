"""Benchmark: ``pointgeope prepare`` vs the field's usual preparation of raw S3DIS, end to end.

The baseline is the way PointNet's ``collect_indoor3d_data.py`` (and the codebases that copied it)
prepare S3DIS: one process, ``np.loadtxt`` on each annotation file, concatenate ``x y z r g b label``
per room and ``np.save`` one ``.npy`` per room. Ours parses the same rooms into ``Area_N.h5``
(``--jobs 1`` and ``--jobs 2``, from scratch each time, validation, checksums and lock included). The
rooms are the real rooms of ``../shared/data/s3dis_real`` when present (the full 352k-point office), else
those of ``tests/fixtures/s3dis``, copied into several rooms and areas of a temporary tree (files are
read once beforehand so that every method finds them in the page cache). A second table times the
whole-file parsers on the same text: why ``data_prep.parse`` reads well-formed files with pandas.
A third table is the rate per worker: prepare's room reader (``load_room``: read, parse, validate, and since
they were added the normals, which prepare's summary reports apart from its "MB/s per worker") beside bare
``pandas.read_csv`` of the same files in the same process. The machine is shared: the load average before and after is
saved with the numbers.

Usage: python bench/bench_prepare.py [--copies 6] [--reps 2] [--out bench/results/bench_prepare.json]
"""
from __future__ import annotations

import argparse
import io
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from bench_io import provenance, save_json
from pointgeope.plural import counted

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("POINTGEOPE_SHARED", REPO.parent / "shared"))
RESULTS = REPO / "bench" / "results" / "bench_prepare.json"


def real_rooms() -> Path:
    full = SHARED / "data" / "s3dis_real"
    return full if (full / "Area_2/office_resampled").is_dir() else REPO / "tests" / "fixtures" / "s3dis"


def build_tree(real: Path, root: Path, copies: int) -> int:
    """``copies`` copies of office_resampled spread over two areas, plus office_2; returns the text bytes."""
    rooms = [(real / "Area_1/office_2", "Area_1/office_2")]
    rooms += [(real / "Area_2/office_resampled", f"Area_{1 + k % 2}/office_{10 + k}") for k in range(copies)]
    total = 0
    for src, dst in rooms:
        (root / dst / "Annotations").mkdir(parents=True)
        for f in sorted((src / "Annotations").iterdir()):
            shutil.copyfile(f, root / dst / "Annotations" / f.name)
            total += f.stat().st_size
    return total


def baseline(raw: Path, out: Path) -> None:
    """PointNet-style: np.loadtxt per annotation file, one .npy (x y z r g b label) per room, one worker."""
    from pointgeope.constants import CLASS_INDEX, CLUTTER

    for room in sorted(p for p in raw.glob("Area_*/*") if p.is_dir()):
        points = []
        for f in sorted((room / "Annotations").glob("*.txt")):
            values = np.loadtxt(f, ndmin=2)  # (ndmin: office_2 has one-line files)
            label = CLASS_INDEX.get(f.stem.rsplit("_", 1)[0], CLUTTER)
            points.append(np.concatenate([values, np.full((len(values), 1), label)], axis=1))
        (out / room.parent.name).mkdir(parents=True, exist_ok=True)
        np.save(out / room.parent.name / f"{room.name}.npy", np.concatenate(points))


def ours(raw: Path, out: Path, jobs: int) -> None:
    import contextlib

    from data_prep.prepare import PrepareConfig, prepare

    with contextlib.redirect_stdout(io.StringIO()):
        prepare(PrepareConfig(raw, out, jobs=jobs, force=True, progress=False))


def _cpu_seconds() -> float:
    """CPU time (user + system) of this process and of its waited-for children (the worker processes)."""
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def best_times(runs: dict, reps: int, fresh: Path) -> tuple[dict[str, float], dict[str, float]]:
    """Best wall time and best CPU time of ``reps`` for each method, the methods interleaved so that a
    change of load hits all alike. The CPU time does not grow with the load of a shared machine (the wall
    time does): it is the work each method does."""
    best = {name: float("inf") for name in runs}
    cpu = {name: float("inf") for name in runs}
    for _ in range(reps):
        for name, fn in runs.items():
            shutil.rmtree(fresh, ignore_errors=True)
            fresh.mkdir(parents=True)
            t0, c0 = time.perf_counter(), _cpu_seconds()
            fn(fresh)
            best[name] = min(best[name], time.perf_counter() - t0)
            cpu[name] = min(cpu[name], _cpu_seconds() - c0)
    return best, cpu


def parser_table(files: list[Path], reps: int) -> list[dict]:
    """Whole-file parsers on the same bytes (best of ``reps``), values checked equal to np.loadtxt."""
    import pandas as pd

    from data_prep.parse import parse_points

    data = [f.read_bytes() for f in files]
    size = sum(map(len, data))
    parsers = {
        "np.loadtxt": lambda d: np.loadtxt(io.BytesIO(d)).ravel(),
        "pandas.read_csv(sep=' ', engine='c')": lambda d: pd.read_csv(
            io.BytesIO(d), sep=" ", header=None, dtype=np.float64, na_filter=False).to_numpy().ravel(),
        "data_prep.parse.parse_points (pandas + checks)": lambda d: parse_points(d).values.ravel(),
    }
    try:
        import pyarrow as pa
        import pyarrow.csv as pacsv

        def arrow(d):
            table = pacsv.read_csv(pa.py_buffer(d), read_options=pacsv.ReadOptions(autogenerate_column_names=True),
                                   parse_options=pacsv.ParseOptions(delimiter=" "))
            return np.stack([c.to_numpy().astype(np.float64) for c in table.columns], axis=1).ravel()

        parsers["pyarrow.csv.read_csv(delimiter=' ')"] = arrow
    except ImportError:
        pass
    reference = [parsers["np.loadtxt"](d) for d in data]
    rows = []
    for name, fn in parsers.items():
        best = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            values = [fn(d) for d in data]
            best = min(best, time.perf_counter() - t0)
        assert all(np.array_equal(a, b) for a, b in zip(values, reference, strict=True)), \
            f"{name} differs from np.loadtxt"
        rows.append({"parser": name, "seconds": best, "mb_per_s": size / 1e6 / best})
    return rows


def worker_rates(raw: Path, reps: int) -> list[dict]:
    """Per worker, in this one process: prepare's room reader (``data_prep.room.load_room``: read, parse,
    validate; the "MB/s per worker" of prepare's summary) against bare ``pandas.read_csv`` (C engine) of
    each file of the same rooms, read from the same page cache. Best of ``reps``, interleaved; wall and
    CPU seconds (the CPU time is what a shared machine's load changes least)."""
    import pandas as pd

    from data_prep.room import load_room
    from data_prep.source import FolderSource

    source = FolderSource(raw)
    rooms = source.rooms()
    files = [raw / entry.path for room in rooms for entry in room.files]
    size = sum(f.stat().st_size for f in files)

    def bare():
        for f in files:
            pd.read_csv(io.BytesIO(f.read_bytes()), sep=" ", header=None, dtype=np.float64, na_filter=False,
                        engine="c").to_numpy()

    def ours():
        for room in rooms:
            load_room(source, room)

    runs = {"pandas.read_csv per file (C engine), bare": bare, "prepare's room reader (load_room)": ours}
    wall = {name: float("inf") for name in runs}
    cpu = dict(wall)
    for fn in runs.values():
        fn()  # warm-up: imports, page cache
    for _ in range(reps):
        for name, fn in runs.items():
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            wall[name] = min(wall[name], time.perf_counter() - t0)
            cpu[name] = min(cpu[name], time.process_time() - c0)
    base = next(iter(runs))
    return [{"reader": n, "seconds": wall[n], "cpu_seconds": cpu[n], "mb_per_s": size / 1e6 / wall[n],
             "mb_per_cpu_s": size / 1e6 / cpu[n], "of_pandas_wall": wall[base] / wall[n],
             "of_pandas_cpu": cpu[base] / cpu[n]} for n in runs]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, default=6, help="copies of the 352k-point room")
    parser.add_argument("--reps", type=int, default=2, help="repetitions per method (best is kept)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the results (JSON)")
    args = parser.parse_args()
    real = real_rooms()
    run = provenance([1, 2], ("numpy", "pandas", "pyarrow", "h5py", "numba"))   # prepare --jobs 1 and 2
    load_before = run["load_average_1min"]
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "raw"
        size = build_tree(real, raw, args.copies)
        for f in raw.rglob("*.txt"):
            f.read_bytes()  # warm the page cache for every method alike
        runs = {
            "baseline: np.loadtxt per file, .npy per room, 1 worker": lambda o: baseline(raw, o),
            "pointgeope prepare --jobs 1": lambda o: ours(raw, o, 1),
            "pointgeope prepare --jobs 2": lambda o: ours(raw, o, 2),
        }
        ours(raw, Path(tmp) / "warm-up", 1)  # imports h5py and tqdm once, outside the timings
        times, cpu = best_times(runs, args.reps, Path(tmp) / "out")
        workers = worker_rates(raw, args.reps)
    base = next(iter(times.values()))
    base_cpu = next(iter(cpu.values()))
    rows = [{"method": n, "seconds": t, "mb_per_s": size / 1e6 / t, "speedup": base / t, "cpu_seconds": cpu[n],
             "cpu_ratio": base_cpu / cpu[n]} for n, t in times.items()]
    parsers = parser_table(sorted((real / "Area_2/office_resampled/Annotations").glob("*.txt")), args.reps)

    rooms = 1 + args.copies
    load_after = os.getloadavg()[0]
    print(f"{counted(rooms, 'room')} from {real}, {size / 1e6:.1f} MB of annotation text, "
          f"{counted(os.cpu_count() or 0, 'core')}, "
          f"load average {load_before:.2f} before, {load_after:.2f} after")
    print(f"{'method':<58}{'seconds':>9}{'MB/s':>8}{'speedup':>9}{'CPU s':>8}{'CPU ratio':>10}")
    for r in rows:
        print(f"{r['method']:<58}{r['seconds']:>9.2f}{r['mb_per_s']:>8.1f}{r['speedup']:>8.2f}x"
              f"{r['cpu_seconds']:>8.2f}{r['cpu_ratio']:>9.2f}x")
    print(f"\n{'per worker, same rooms, one process':<58}{'seconds':>9}{'MB/s':>8}{'CPU s':>8}{'MB/CPU s':>9}"
          f"{'of pandas (wall, CPU)':>23}")
    for r in workers:
        print(f"{r['reader']:<58}{r['seconds']:>9.2f}{r['mb_per_s']:>8.1f}{r['cpu_seconds']:>8.2f}"
              f"{r['mb_per_cpu_s']:>9.1f}{r['of_pandas_wall']:>14.0%}{r['of_pandas_cpu']:>8.0%}")
    print(f"\n{'parser (whole file, office_resampled text)':<58}{'seconds':>9}{'MB/s':>8}")
    for r in parsers:
        print(f"{r['parser']:<58}{r['seconds']:>9.3f}{r['mb_per_s']:>8.1f}")
    save_json(args.out, {
        "benchmark": "prepare", "rooms": rooms, "rooms_from": str(real.relative_to(REPO.parent)
                                                                  if real.is_relative_to(REPO.parent) else real),
        "text_bytes": size, "reps": args.reps, "provenance": run,
        "machine": {"load_average_1min_after": load_after},       # the rest: provenance
        "end_to_end": rows, "per_worker": workers, "parsers": parsers}, indent=1)
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
