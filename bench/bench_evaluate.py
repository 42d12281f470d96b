"""Benchmark: full-resolution evaluation by fragment voting: the published fragments of real and synthetic
rooms with their time per room, and peak memory against room size.

Fragments (``--fragments``, the default part): for the real office of ``shared/data/s3dis_real``
(``--real``, skipped when absent) and a synthetic 1M-point room (below), the published test-time
fragments at grid 0.04 m: points, occupied voxels ``V``, fragments ``F`` (points in the densest voxel),
the points each voxel holds, how many point predictions the room costs (``F x V``), and the time of
``vote_room`` with the network of ``configs/demo.yaml`` (1 thread, crops of 80,000 points): measured over
the first ``--timed-fragments`` fragments and projected to all ``F`` (time is linear in the fragments).

Memory (``--memory``): rooms of 0.5M to 4M points (synthetic: the floor, ceiling and walls of a box room
and a few tables, sampled at a scanner-like 8,000 points per m^2, so a bigger room is a bigger floor) are
evaluated with ``vote_room`` under the published data settings (grid 0.04 m, crops of at most 80,000
points, one view, the first two fragments: memory does not grow with the number of fragments, which are
made one at a time) and a randomly initialised network of ``configs/demo.yaml``. The baseline, in the
same run, is the naive one-pass inference: the whole room through the network at once, at the sizes
where that still fits. Each (mode, size) runs in a fresh process: ``peak_rss_mb`` is the process's peak
resident set (ru_maxrss) at the end, ``growth_mb`` its growth during inference (after the room and the
model exist); ``seconds`` the wall time of the inference. Memory that grows with the room is the
``N x 13`` float32 score buffer (52 bytes a point) plus the room's arrays; the network's share is
bounded by the crop size.

Every JSON (``--out``; ``--quick`` writes a temporary file unless given one) records the run's provenance
(commit, dirty flag, torch / numpy / numba versions, threads, load average).

Usage: python bench/bench_evaluate.py [--fragments] [--memory] [--real DIR] [--quick] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import time
from pathlib import Path

import interleave
from bench_io import git_state, out_path, provenance, save_json

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "bench_evaluate.json"
PUBLISHED = REPO / "bench" / "results" / "bench_evaluate_published.json"
DENSITY = 8000.0  # points per m^2 of surface


def synthetic_room(n: int, seed: int = 0):
    """``coord`` float32 (n, 3) and ``color`` uint8 (n, 3): a square room of height 3 m whose floor,
    ceiling and walls (and one 0.8 m table per 10 m^2) hold about ``DENSITY`` points per m^2."""
    import numpy as np

    rng = np.random.default_rng(seed)
    # surface(side) = 2 side^2 (floor, ceiling) + 4 * 3 side (walls) + tables ~ n / DENSITY
    side = (-12 + (144 + 8 * n / DENSITY) ** 0.5) / 4
    faces = [(side * side, "floor"), (side * side, "ceiling")] + [(3 * side, f"wall{k}") for k in range(4)]
    tables = max(1, int(side * side / 10))
    faces += [(1.0, f"table{t}") for t in range(tables)]
    total = sum(a for a, _ in faces)
    parts = []
    for area, name in faces:
        m = int(np.ceil(n * area / total))  # >= n points in all; cut to exactly n below
        u, v = rng.random(m), rng.random(m)
        if name == "floor" or name == "ceiling":
            p = np.stack([u * side, v * side, np.full(m, 0.0 if name == "floor" else 3.0)], 1)
        elif name.startswith("wall"):
            k = int(name[4:])
            along, height = u * side, v * 3.0
            fixed = np.zeros(m) if k < 2 else np.full(m, side)
            p = np.stack([along, fixed, height], 1) if k % 2 == 0 else np.stack([fixed, along, height], 1)
        else:
            cx, cy = rng.random(2) * max(side - 1, 0.1)
            p = np.stack([cx + u, cy + v, np.full(m, 0.8)], 1)
        parts.append(p)
    coord = np.concatenate(parts)[:n]
    coord = (coord + rng.normal(0, 0.003, coord.shape)).astype(np.float32)
    color = rng.integers(0, 256, (coord.shape[0], 3), dtype=np.uint8)
    return coord, color


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _case(mode: str, n: int, queue) -> None:
    import torch

    from pointgeope.engine import build
    from pointgeope.engine.config import load_config
    from pointgeope.engine.evaluate import vote_room

    torch.manual_seed(0)
    torch.set_num_threads(1)  # one thread: steady timings on a shared 2-core machine
    cfg = load_config(REPO / "configs" / "demo.yaml",
                      ["data.grid_size=0.04", "data.voxel_max=80000", "eval.batch_points=80000",
                       "eval.max_fragments=2"])
    model = build.model(cfg).eval()
    coord, color = synthetic_room(n)
    before = _rss_mb()
    t0 = time.perf_counter()
    if mode == "vote":
        result = vote_room(model, coord, color, cfg, torch.device("cpu"), seed=0)
        extra = {"fragments": result.fragments[0], "fragments_run": 2}
        assert (result.votes >= 1).all()
    else:  # the whole room through the network at once
        pos = torch.from_numpy(coord - coord.min(0))
        x = torch.cat([torch.from_numpy(color.astype("float32") / 255), pos], 1)
        with torch.inference_mode():
            model(pos, x, torch.tensor([n])).argmax(1)
        extra = {}
    seconds = time.perf_counter() - t0
    queue.put({"mode": mode, "points": n, "seconds": round(seconds, 3), "points_per_s": round(n / seconds),
               "peak_rss_mb": round(_rss_mb(), 1), "growth_mb": round(_rss_mb() - before, 1), **extra})


def run_case(mode: str, n: int, timeout: float) -> dict:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_case, args=(mode, n, queue))
    proc.start()
    proc.join(timeout)
    if proc.is_alive():
        proc.kill()
        proc.join()
        return {"mode": mode, "points": n, "error": f"timed out after {timeout:.0f}s"}
    if proc.exitcode != 0:
        return {"mode": mode, "points": n, "error": f"exit code {proc.exitcode} (out of memory?)"}
    return queue.get()


def read_real_room(folder: Path):
    """``coord`` float32 and ``color`` uint8 of a raw S3DIS room folder (its ``Annotations/*.txt``)."""
    import numpy as np

    parts = [np.loadtxt(f, dtype=np.float64, ndmin=2) for f in sorted((folder / "Annotations").glob("*.txt"))]
    data = np.concatenate(parts)
    return data[:, :3].astype(np.float32), data[:, 3:6].astype(np.uint8)


def fragment_row(name: str, coord, color, timed: int) -> dict:
    """The published fragments of one room and the time ``vote_room`` takes on them (see the docstring)."""
    import numpy as np
    import torch

    from pointgeope.data.fragments import voxel_fragments
    from pointgeope.engine import build
    from pointgeope.engine.config import load_config
    from pointgeope.engine.evaluate import vote_room

    torch.manual_seed(0)
    torch.set_num_threads(1)
    fragments = voxel_fragments(coord - coord.min(0), 0.04, np.random.default_rng(0))
    counts = fragments.groups.counts
    f, v = len(fragments), fragments.groups.num_voxels
    run = min(f, timed)
    cfg = load_config(REPO / "configs" / "demo.yaml", ["data.grid_size=0.04", "data.voxel_max=80000",
                                                       "eval.batch_points=80000", f"eval.max_fragments={run}"])
    model = build.model(cfg).eval()
    t0 = time.perf_counter()
    vote_room(model, coord, color, cfg, torch.device("cpu"), seed=0)
    seconds = time.perf_counter() - t0
    per_point = np.repeat(counts, counts)                    # the count of each point's voxel
    return {"room": name, "points": int(coord.shape[0]), "voxels": v, "fragments": f,
            "points_per_voxel": {q: float(np.percentile(counts, q)) for q in (50, 90, 99, 100)},
            "predictions": f * v, "predictions_per_point": round(f * v / coord.shape[0], 2),
            "points_in_voxels_of_1": round(float((per_point == 1).mean()), 4),
            "fragments_timed": run, "seconds_timed": round(seconds, 2),
            "seconds_per_fragment": round(seconds / run, 3), "seconds_projected": round(seconds / run * f, 1)}


def fragments_part(real: Path, timed: int) -> list[dict]:
    rows = []
    office = real / "Area_2" / "office_resampled"
    if office.is_dir():
        rows.append(fragment_row("real Area_2/office_resampled", *read_real_room(office), timed))
    else:
        print(f"no real room at {office}: skipped (give --real)")
    rows.append(fragment_row("synthetic 1M points, 8000 / m^2", *synthetic_room(1_000_000), timed))
    for row in rows:
        print(json.dumps(row), flush=True)
    return rows


def memory_part(args) -> list[dict]:
    rows = []
    for mode, sizes in (("one_pass", args.baseline_sizes),
                        ("vote", sorted(set(args.sizes) | set(args.baseline_sizes)))):
        for m in sizes:
            row = run_case(mode, int(m * 1e6), args.timeout)
            rows.append(row)
            print(json.dumps(row), flush=True)
    by = {(r["mode"], r["points"]): r for r in rows if "error" not in r}
    print(f"\n{'points':>10} {'vote s':>8} {'vote MB':>8} {'growth':>8} {'1-pass s':>9} {'1-pass MB':>9} {'growth':>8}"
          f" {'MB ratio':>8}")
    for n in sorted({r["points"] for r in rows}):
        v, b = by.get(("vote", n)), by.get(("one_pass", n))
        cells = [f"{n:>10,}"]
        cells += [f"{v['seconds']:>8.1f} {v['peak_rss_mb']:>8.0f} {v['growth_mb']:>8.0f}" if v else " " * 26]
        cells += [f"{b['seconds']:>9.1f} {b['peak_rss_mb']:>9.0f} {b['growth_mb']:>8.0f}" if b else " " * 28]
        if v and b:
            cells.append(f"{b['growth_mb'] / max(v['growth_mb'], 1):>8.2f}x")
        print(" ".join(cells))
    return rows


# --- the published test of one room (--published; evaluate_published.py) ------------------------------------

def compare(args) -> dict:
    """``published_case`` for each checkout of ``--compare`` (PYTHONPATH) and each thread count, in fresh
    processes, interleaved ``--rounds`` times (each round runs every case once, in an order rotated each
    round); per case its minimum, the median
    and range of its per-round ratios to the first checkout at the same threads (paired), the ratio of the
    minima, and the commit and dirty flag of every checkout (``trees``)."""
    import tempfile

    import numpy as np

    from evaluate_published import published_room

    cases = [(path, threads, variant) for threads in args.thread_counts for path in args.compare
             for variant in (args.variants if path == args.compare[-1] else ["auto"])]
    with tempfile.TemporaryDirectory() as tmp:
        room = Path(tmp) / "room.npz"                   # one room, this checkout's, for every checkout
        coord, color = published_room(args)
        np.savez(room, coord=coord, color=color)
        runs = _rounds(args, cases, room)
    rows = []
    for (path, threads, _variant), got in runs.items():
        best = min(got, key=lambda row: row["seconds_per_room"])
        base = [row["seconds_per_room"] for row in runs[(args.compare[0], threads, "auto")]]
        rounds = [g["seconds_per_room"] for g in got]
        pair = interleave.paired({"base": base, "case": rounds}, "base")["case"]
        rows.append({**best, "checkout": str(path), "seconds_rounds": rounds,
                     "paired_ratios": pair["paired_ratios"], "paired_median": round(pair["paired_median"], 3),
                     "paired_range": [round(x, 3) for x in pair["paired_range"]],
                     "ratio_to_first": round(pair["ratio_of_mins"], 3)})
    return {"rows": rows, "rounds": args.rounds, "trees": {str(path): git_state(Path(path)) for path in args.compare},
            "ratios": "paired_median: the median over rounds of the case's seconds over the first checkout's in the "
                      "same round (same threads), paired_range their range; ratio_to_first: the ratio of the minima"}


def _rounds(args, cases: list[tuple], room: Path) -> dict[tuple, list[dict]]:
    """The rows of ``--rounds`` interleaved rounds of every case ``(checkout, threads, variant)`` of
    :func:`compare`, each a fresh process testing the ``room`` file (``--room``)."""
    import os
    import subprocess
    import sys

    runs: dict[tuple, list[dict]] = {case: [] for case in cases}
    for r in range(args.rounds):                        # every case once a round, the order rotated each round
        for path, threads, variant in cases[r % len(cases):] + cases[:r % len(cases)]:
            cmd = [sys.executable, __file__, "--case", "--size", args.size, "--config", args.config, "--device",
                   args.device, "--threads", str(threads), "--reps", "1", "--variant", variant, "--room", str(room),
                   "--set", *args.set]
            env = dict(os.environ, PYTHONPATH=str(path), OMP_NUM_THREADS=str(threads))
            text = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
            row = json.loads(text.strip().splitlines()[-1])
            runs[(path, threads, variant)].append(row)
            print(f"round {r + 1}: {path} threads {threads} {variant}: {row['seconds_per_room']} s", flush=True)
    return runs


def published_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("the published test of one room (--published, --compare)")
    g.add_argument("--published", action="store_true", help="time vote_room of one synth room, write --out")
    g.add_argument("--case", action="store_true", help="(internal) one published case, its JSON on stdout")
    g.add_argument("--compare", type=Path, nargs="+", help="checkouts (PYTHONPATH) to time interleaved, baseline first")
    g.add_argument("--size", choices=("tiny", "demo", "bench"), default="bench", help="the synth --size of the room")
    g.add_argument("--config", default="configs/s3dis/pt_geope.yaml")
    g.add_argument("--set", nargs="*", default=[], metavar="section.key=value", help="config overrides (last option)")
    g.add_argument("--device", default="cuda" if _cuda() else "cpu")
    g.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    g.add_argument("--thread-counts", type=int, nargs="+", default=[2, 1], help="--compare: threads of each case")
    variants = ("auto", "thread", "thread-in-model", "inline")
    g.add_argument("--variants", nargs="+", default=["auto"], choices=variants,
                   help="--compare, last checkout: auto (the code's choice), thread (pieces and CPU hierarchy in the "
                        "background thread), thread-in-model (pieces there, hierarchy in the model), inline (no "
                        "thread)")
    g.add_argument("--variant", default="auto", choices=variants)
    g.add_argument("--reps", type=int, default=1)
    g.add_argument("--room", type=Path, help="(internal) the room's coord and color (.npz), written by --compare")
    g.add_argument("--agree-amp", choices=("none", "bf16", "fp16"),
                   help="--published: also the room at this eval.amp, its time and the agreement of the votes")
    g.add_argument("--rounds", type=int, default=3, help="--compare: interleaved rounds")
    g.add_argument("--out", type=Path, help="results JSON (default: bench/results/bench_evaluate_published.json with "
                                            "--published / --compare, bench/results/bench_evaluate.json otherwise; "
                                            "--quick: a temporary file)")


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fragments", action="store_true", help="the fragments part (default: both parts)")
    parser.add_argument("--memory", action="store_true", help="the memory part (default: both parts)")
    parser.add_argument("--real", type=Path, default=REPO.parent / "shared" / "data" / "s3dis_real")
    parser.add_argument("--timed-fragments", type=int, default=4)
    parser.add_argument("--sizes", type=float, nargs="+", default=[0.5, 1, 2, 4], help="millions of points")
    parser.add_argument("--baseline-sizes", type=float, nargs="+", default=[0.1, 0.25, 0.5])
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--quick", action="store_true", help="sizes 0.1 0.2, baseline 0.1 (a smoke test)")
    published_args(parser)
    args = parser.parse_args()
    from evaluate_published import published_case  # bench/ is on sys.path when this file runs
    if args.case:
        print(json.dumps(published_case(args)), flush=True)
        return
    if args.published or args.compare:
        import os

        path = args.out or PUBLISHED
        run = provenance(args.thread_counts if args.compare else args.threads, ("numpy", "torch", "numba"))
        out = compare(args) if args.compare else published_case(args)
        out.update(benchmark="bench_evaluate --published", provenance=run, load_average=os.getloadavg(),
                   time="wall seconds of vote_room of the whole room (every view, the fragments of eval.max_fragments)")
        save_json(path, out, indent=1)
        print(json.dumps(out, indent=1))
        return
    both = not (args.fragments or args.memory)
    if args.quick:
        args.sizes, args.baseline_sizes = [0.1, 0.2], [0.1]
    path = out_path(args.out, RESULTS, args.quick)
    run = provenance(1, ("numpy", "torch", "numba"))
    out = json.loads(path.read_text()) if path.is_file() else {}
    if args.fragments or both:
        out["fragments"] = fragments_part(args.real, args.timed_fragments)
    if args.memory or both:
        out["rows"] = memory_part(args)
    import os

    out.update({"benchmark": "bench_evaluate", "provenance": run, "torch_threads": 1,
                "density_per_m2": DENSITY, "load_average": os.getloadavg(),
                "settings": "configs/demo.yaml network, grid 0.04, voxel_max 80000, batch_points 80000, 1 view; "
                            "memory rows: the first 2 fragments"})
    save_json(path, out, indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
