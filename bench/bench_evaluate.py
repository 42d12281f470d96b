"""Benchmark: full-resolution evaluation by fragment voting, peak memory and time against room size.

Rooms of 0.5M to 4M points (synthetic: the floor, ceiling and walls of a box room and a few tables,
sampled at a scanner-like 8,000 points per m^2, so a bigger room is a bigger floor) are evaluated with
``pointgeope.engine.evaluate.vote_room`` under the published recipe's data settings (grid 0.04 m, crops
of at most 80,000 points, one view) and a randomly initialised network of ``configs/demo.yaml``.
The baseline, in the same run, is the naive one-pass inference: the whole room through the network at
once, at the sizes where that still fits.

Each (mode, size) runs in a fresh process: ``peak_rss_mb`` is the process's peak resident set
(ru_maxrss) at the end, ``growth_mb`` its growth during inference (after the room and the model exist);
``seconds`` the wall time of the inference, ``points_per_s`` = room points / seconds. Vote memory that
grows with the room is the ``N x 13`` float32 buffer (52 bytes a point) plus the room's arrays; the
network's share is bounded by the crop size.

Usage: python bench/bench_evaluate.py [--sizes 0.5 1 2 4] [--baseline-sizes 0.1 0.25 0.5] [--quick]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import platform
import resource
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "bench_evaluate.json"
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
                      ["data.grid_size=0.04", "data.voxel_max=80000", "eval.batch_points=80000"])
    model = build.model(cfg).eval()
    coord, color = synthetic_room(n)
    before = _rss_mb()
    t0 = time.perf_counter()
    if mode == "vote":
        probs, votes = vote_room(model, coord, color, cfg, torch.device("cpu"), seed=0)
        extra = {"mean_votes": float(votes.mean()), "max_votes": int(votes.max())}
        assert (votes >= 1).all()
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=float, nargs="+", default=[0.5, 1, 2, 4], help="millions of points")
    parser.add_argument("--baseline-sizes", type=float, nargs="+", default=[0.1, 0.25, 0.5])
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--quick", action="store_true", help="sizes 0.1 0.2, baseline 0.1 (a smoke test)")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.baseline_sizes = [0.1, 0.2], [0.1]
    rows = []
    for mode, sizes in (("one_pass", args.baseline_sizes), ("vote", sorted(set(args.sizes) | set(args.baseline_sizes)))):
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
    import torch

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({
        "benchmark": "bench_evaluate", "machine": platform.platform(), "torch_threads": 1,
        "torch": torch.__version__, "density_per_m2": DENSITY,
        "settings": "configs/demo.yaml network, grid 0.04, voxel_max 80000, batch_points 80000, 1 view",
        "rows": rows}, indent=1) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
