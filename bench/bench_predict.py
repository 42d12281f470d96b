"""Benchmark: peak memory and time of ``pointgeope predict`` against the size of the scan.

Scans of 0.25M to 2M points (``bench_evaluate.synthetic_room``: floor, ceiling, walls and tables of a
box room at 8,000 points per m^2, written as ``(N, 6)`` float64 ``.npy``) are predicted end to end by
``pointgeope predict CKPT scan.npy --out DIR`` (read, vote, write ``npy`` + ``ply``) with a randomly
initialised network of ``configs/demo.yaml`` saved as a checkpoint, under the published recipe's data
settings (grid 0.04 m, crops of at most 80,000 points, 80,000 points per forward, one view).

Each case runs in a fresh process and reports its peak resident set (ru_maxrss). The baseline, measured
in the same run and interleaved with it (load, predict, load, predict ...), is a process that does
everything but the prediction: imports, loads the checkpoint and reads the scan. ``added_mb`` = predict's
peak minus the baseline's at the same size: what voting and writing add. It grows with N through the
per-point buffers (scores ``N x 13`` float32, votes, the float32 copy of the coordinates, the room arrays
inside ``vote_room``, the output records), not through the network, whose share is bounded by the crop
size; the fit ``added_mb = a + b * N`` gives both.

The JSON (``--out``; ``--quick`` writes a temporary file unless given one) records the run's provenance:
commit, dirty flag, torch / numpy / numba versions, threads, load average.

Usage: python bench/bench_predict.py [--sizes 0.25 0.5 1 2] [--threads 1 2] [--quick] [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from bench_io import out_path, provenance, save_json  # noqa: E402 - after the sys.path line

RESULTS = REPO / "bench" / "results" / "bench_predict.json"
SETTINGS = ["data.grid_size=0.04", "data.voxel_max=80000", "eval.batch_points=80000"]


def make_checkpoint(path: Path) -> None:
    import torch

    from pointgeope.engine import build
    from pointgeope.engine.checkpoint import save_checkpoint
    from pointgeope.engine.config import config_to_dict, load_config
    from pointgeope.engine.prediction_info import prediction_metadata

    torch.manual_seed(0)
    cfg = load_config(REPO / "configs" / "demo.yaml", SETTINGS)
    resolved = config_to_dict(cfg)
    save_checkpoint(path, {"config": resolved, "model": build.model(cfg).state_dict(), "epoch": 0,
                           "predict": prediction_metadata(resolved)})


def make_scan(path: Path, n: int) -> None:
    import numpy as np

    from bench.bench_evaluate import synthetic_room

    coord, color = synthetic_room(n)
    np.save(path, np.c_[coord.astype(np.float64), color])


def _case(mode: str, ckpt: str, scan: str, out: str, threads: int, queue) -> None:
    import torch

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    if mode == "load":
        from pointgeope.engine.predict import load_predictor
        from pointgeope.scans.sources import find_scans, read_scan

        load_predictor(ckpt, device="cpu")
        read_scan(find_scans([scan])[0][0])
        code = 0
    else:
        import contextlib
        import io

        from pointgeope.cli import main

        with contextlib.redirect_stdout(io.StringIO()):
            code = main(["predict", ckpt, scan, "--out", out, "--device", "cpu"])
    queue.put({"code": code, "seconds": time.perf_counter() - t0,
               "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})


def run_case(mode: str, ckpt: Path, scan: Path, out: Path, threads: int, timeout: float) -> dict:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_case, args=(mode, str(ckpt), str(scan), str(out), threads, queue))
    proc.start()
    proc.join(timeout)
    if proc.is_alive():
        proc.kill()
        proc.join()
        return {"error": f"timed out after {timeout:.0f}s"}
    if proc.exitcode != 0:
        return {"error": f"exit code {proc.exitcode} (out of memory?)"}
    return queue.get()


def fit(rows: list[dict]) -> dict:
    """Least squares ``added_mb = a + b * N`` over the rows (b in MB per million points = bytes per point)."""
    import numpy as np

    n = np.array([r["points"] for r in rows], dtype=float) / 1e6
    y = np.array([r["added_mb"] for r in rows])
    b, a = np.polyfit(n, y, 1) if len(rows) > 1 else (float("nan"), float(y[0]))
    return {"intercept_mb": round(float(a), 1), "bytes_per_point": round(float(b), 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=float, nargs="+", default=[0.25, 0.5, 1, 2], help="millions of points")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--quick", action="store_true", help="sizes 0.05 0.1, one thread (a smoke test)")
    parser.add_argument("--out", type=Path, help=f"results JSON (default bench/results/{RESULTS.name}; "
                                                 "--quick: a temporary file)")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.threads = [0.05, 0.1], [1]
    out = out_path(args.out, RESULTS, args.quick)
    run = provenance(args.threads, ("numpy", "torch", "numba"))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        make_checkpoint(tmp / "model.pt")
        for m in args.sizes:
            n = int(m * 1e6)
            make_scan(tmp / "scan.npy", n)
            for threads in args.threads:
                load = run_case("load", tmp / "model.pt", tmp / "scan.npy", tmp / "out", threads, args.timeout)
                pred = run_case("predict", tmp / "model.pt", tmp / "scan.npy", tmp / "out", threads, args.timeout)
                row = {"points": n, "threads": threads}
                if "error" in load or "error" in pred or pred["code"] != 0:
                    row["error"] = load.get("error") or pred.get("error") or f"exit {pred['code']}"
                else:
                    row.update({"baseline_peak_mb": round(load["peak_rss_mb"], 1),
                                "predict_peak_mb": round(pred["peak_rss_mb"], 1),
                                "added_mb": round(pred["peak_rss_mb"] - load["peak_rss_mb"], 1),
                                "seconds": round(pred["seconds"], 2),
                                "points_per_s": round(n / pred["seconds"])})
                rows.append(row)
                print(json.dumps(row), flush=True)
    ok = [r for r in rows if "error" not in r]
    fits = {str(t): fit([r for r in ok if r["threads"] == t]) for t in args.threads
            if any(r["threads"] == t for r in ok)}
    print(f"\n{'points':>10} {'threads':>7} {'baseline MB':>11} {'predict MB':>10} {'added MB':>9} {'s':>7}")
    for r in ok:
        print(f"{r['points']:>10,} {r['threads']:>7} {r['baseline_peak_mb']:>11.0f} {r['predict_peak_mb']:>10.0f} "
              f"{r['added_mb']:>9.0f} {r['seconds']:>7.1f}")
    print("fit added_mb = a + b * N:", json.dumps(fits))
    save_json(out, {
        "benchmark": "bench_predict", "provenance": run,
        "settings": "configs/demo.yaml network (random weights), " + ", ".join(SETTINGS) + ", 1 view, npy+ply out",
        "fit": fits, "rows": rows}, indent=1)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
