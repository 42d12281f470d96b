"""Benchmark: Point Transformer with each positional encoding, and the point ops backends.

On a synthetic room (surfaces of a 10 x 8 x 3 m box and 20 furniture boxes, points thinned to about one
per 4 cm voxel, like a training crop), measured in one run so that every ratio compares like with like:

    ops      kNN (k = 16) at 80k points: pykdtree, scipy cKDTree, pure torch (its 80k x 80k brute force is
             timed on 16k of the queries and scaled by 5: linear in the queries); FPS 80k -> 20k:
             numba (bucket FPS, ``bucket_fps``), pure torch (iterative).
    layer    one attention layer (C = 64, k = 16, share_planes 8: the width of the second stage at full
             resolution) at 16k, 32k, 80k points: a training step (forward + backward, train mode) and
             inference (eval, no grad), every preset.
    network  the full PointTransformerSeg50 (7.8M parameters) at 16k points (``--full``: also 32k, 80k) per
             cloud, ``--batch`` clouds per batch, training step and inference, every preset. The step
             includes the network's point hierarchy (FPS, kNN, 3-NN), as ``model(coord, feat, offset)``
             computes it; the hierarchy is also timed alone on the same input, and its share of the
             training step is reported (in training the data loader's workers compute it instead).

Time: the process CPU time (``time.process_time``) of one torch thread by default, the minimum over
repetitions, presets interleaved: on the shared 2-core machine wall time swings by 2x with the other
users' load, CPU time much less (the wall time is saved too, with the load average). Memory: the peak resident set size
(RSS) above the level just before the call, sampled every millisecond by a thread reading /proc/self/statm; glibc is
told (``MALLOC_MMAP_THRESHOLD_``) to map every large block so that freed tensors leave the RSS at once. For the
layer we also report the bytes autograd saves for the backward pass (exact, from saved-tensor hooks).
``--malloc default`` leaves glibc alone instead: times as in training (page faults cost about half of the
CPU time above), peak RSS meaningless. Every preset is reported as a ratio to ``rpe`` measured in the same
run; "growth" is the time per point
relative to the smallest size. Goals: ``geope`` within 1.05x of ``rpe`` (time and memory), ``lingeope``
within 1.25x time and 1.15x memory. Results go to bench/results/bench_model.json.

Usage: python bench/bench_model.py [--full] [--reps 3] [--threads 2] [--batch 2] [--presets rpe geope ...]
       [--skip-ops] [--skip-layer] [--malloc mmap|default] [--out results.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

if (__name__ == "__main__" and os.environ.get("MALLOC_MMAP_THRESHOLD_") is None
        and not any(a.endswith("default") for a in sys.argv)):
    os.environ["MALLOC_MMAP_THRESHOLD_"] = "65536"                   # before torch allocates anything
    os.execv(sys.executable, [sys.executable] + sys.argv)

import numpy as np
import torch

from bench_io import provenance, save_json
from pointgeope.model import PRESETS, PointTransformerLayer, PointTransformerSeg
from pointgeope.model.kernel_check import timed
from pointgeope.model.ops import fps, knn

RESULTS = Path(__file__).resolve().parent / "results" / "bench_model.json"
PAGE = os.sysconf("SC_PAGE_SIZE")


def synthetic_room(n: int, seed: int = 0) -> torch.Tensor:
    """``n`` surface points of a furnished 10 x 8 x 3 m room, one per 4 cm voxel, float32 ``(n, 3)``."""
    rng = np.random.default_rng(seed)
    size = np.array([10.0, 8.0, 3.0])
    lo, hi = np.zeros((21, 3)), np.tile(size, (21, 1))
    lo[1:, :2] = rng.random((20, 2)) * (size[:2] - 2.0)
    hi[1:] = lo[1:] + np.column_stack([rng.uniform(0.4, 2.0, (20, 2)), rng.uniform(0.4, 2.0, 20)])
    m = 4 * n
    box = np.where(rng.random(m) < 0.7, 0, rng.integers(1, 21, m))
    coord = lo[box] + rng.random((m, 3)) * (hi[box] - lo[box])
    axis, side = rng.integers(0, 3, m), rng.integers(0, 2, m)
    coord[np.arange(m), axis] = np.where(side == 1, hi[box, axis], lo[box, axis])
    _, first = np.unique(np.floor(coord / 0.04).astype(np.int64), axis=0, return_index=True)
    if len(first) < n:
        raise RuntimeError(f"synthetic room has {len(first)} occupied voxels, fewer than {n}")
    keep = rng.choice(first, n, replace=False)
    return torch.tensor(coord[keep], dtype=torch.float32)


class PeakRSS:
    """Peak resident set size above the level at entry, sampled every millisecond."""

    def __enter__(self):
        self.base = self.peak = self._rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _rss(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * PAGE

    def _watch(self):
        while not self._stop.wait(0.001):
            self.peak = max(self.peak, self._rss())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._rss())
        self.delta = self.peak - self.base


def measure(fn, device: torch.device) -> tuple[float, int, float]:
    """Seconds (CPU: process CPU time; CUDA: wall), peak memory (bytes above the start) and wall seconds."""
    if device.type == "cuda":                      # one run through the package's timer
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        wall = timed(fn, device, reps=1, warmup=0)[1][0]
        return wall, torch.cuda.max_memory_allocated() - base, wall
    with PeakRSS() as rss:
        start, cpu = time.perf_counter(), time.process_time()
        fn()
        cpu, wall = time.process_time() - cpu, time.perf_counter() - start
    return cpu, rss.delta, wall


def saved_bytes(fn) -> int:
    seen = {}

    def pack(t):
        seen[(t.data_ptr(), t.numel(), t.dtype)] = t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def bench_ops(device: torch.device, n: int = 80_000) -> dict:
    coord = synthetic_room(n, seed=1).to(device)
    off = torch.tensor([n], device=device)
    out = {"points": n, "knn_k16_s": {}, "fps_stride4_s": {}}
    for backend in ("pykdtree", "scipy", "torch"):
        if device.type == "cpu" and backend == "torch":
            part = n // 5                          # queries are independent: time a fifth, scale by 5
            seconds = measure(lambda: knn(coord[:part], coord, 16, torch.tensor([part]), off,  # noqa: B023 - measure() runs it at once, in this iteration
                                          backend="torch"), device)[0]
            out["knn_k16_s"]["torch (1/5 of queries x 5)"] = 5 * seconds
            continue
        out["knn_k16_s"][backend] = min(measure(lambda: knn(coord, coord, 16, off, off, backend=backend), device)[0]  # noqa: B023 - measure() runs it at once, in this iteration
                                        for _ in range(2))
    for backend in ("numba", "torch"):
        out["fps_stride4_s"][backend] = measure(lambda: fps(coord, off, 4, backend=backend), device)[0]  # noqa: B023 - measure() runs it at once, in this iteration
    return out


def _train_step(model, coord, feat, *args):
    feat = feat.clone().requires_grad_(True)
    out = model(coord, feat, *args)
    out.float().square().mean().backward()


def _infer(model, coord, feat, *args):
    with torch.no_grad():
        model(coord, feat, *args)


def bench_models(kind: str, sizes: list[int], presets: list[str], reps: list[int], device: torch.device,
                 batch: int = 1) -> list[dict]:
    rows = []
    for n, rep in zip(sizes, reps, strict=True):
        clouds = 1 if kind == "layer" else batch
        coord = torch.cat([synthetic_room(n, seed=2 + b) for b in range(clouds)]).to(device)
        off = torch.arange(1, clouds + 1, device=device) * n
        n = n * clouds
        torch.manual_seed(0)
        if kind == "layer":
            channels, k = 64, 16
            idx, _ = knn(coord, coord, k, off, off)
            feat = torch.randn(n, channels, device=device)
            models = {pe: PointTransformerLayer(channels, 8, k, pe=pe).to(device) for pe in presets}
            args = (idx,)
        else:
            feat = torch.cat([torch.rand(n, 3, device=device), coord], dim=1)
            models = {pe: PointTransformerSeg(pe=pe).to(device) for pe in presets}
            args = (off,)
        times = {pe: {"train": [], "infer": [], "train_wall": [], "infer_wall": []} for pe in presets}
        mems = {pe: {"train": 0, "infer": 0} for pe in presets}
        hierarchy = []                  # the network's point ops alone (FPS, kNN, 3-NN), same inputs
        for _ in range(rep):
            spec = getattr(models[presets[0]], "hierarchy_spec", None)    # None: code before the hierarchy
            if kind == "network" and spec is not None:
                hierarchy.append(measure(lambda: spec(coord, off), device)[0])  # noqa: B023 - measure() runs it at once, in this iteration
            for pe, model in models.items():
                for p in model.parameters():
                    p.grad = None
                for mode, step in (("train", _train_step), ("infer", _infer)):
                    model.train(mode == "train")
                    t, m, wall = measure(lambda: step(model, coord, feat, *args), device)  # noqa: B023 - measure() runs it at once, in this iteration
                    times[pe][mode].append(t)
                    times[pe][mode + "_wall"].append(wall)
                    mems[pe][mode] = max(mems[pe][mode], m)
        saved = {}
        if kind == "layer":
            for pe, model in models.items():
                model.train()
                saved[pe] = saved_bytes(lambda: model(coord, feat.clone().requires_grad_(True), *args))  # noqa: B023 - run at once
        for pe in presets:
            row = {"kind": kind, "points": n, "clouds": clouds, "preset": pe, "reps": rep,
                   "train_s": min(times[pe]["train"]), "infer_s": min(times[pe]["infer"]),
                   "train_wall_s": min(times[pe]["train_wall"]), "infer_wall_s": min(times[pe]["infer_wall"]),
                   "train_peak_mb": mems[pe]["train"] / 2**20, "infer_peak_mb": mems[pe]["infer"] / 2**20}
            if saved:
                row["saved_for_backward_mb"] = saved[pe] / 2**20
            if hierarchy:
                row["point_ops_s"] = min(hierarchy)
                row["point_ops_share_of_train"] = min(hierarchy) / row["train_s"]
            rows.append(row)
        base = next(r for r in rows if r["kind"] == kind and r["points"] == n and r["preset"] == presets[0])
        for row in rows[-len(presets):]:
            for key in ("train_s", "infer_s", "train_peak_mb", "infer_peak_mb", "saved_for_backward_mb"):
                if key in row and base.get(key):
                    row[key.rsplit("_", 1)[0] + "_ratio"] = row[key] / base[key]
            print(f"{kind:7} {n:6d} {row['preset']:13} train {row['train_s']:7.3f} s ({row['train_ratio']:.2f}x)  "
                  f"infer {row['infer_s']:7.3f} s ({row['infer_ratio']:.2f}x)  "
                  f"peak train {row['train_peak_mb']:7.0f} MB ({row.get('train_peak_ratio', float('nan')):.2f}x)  "
                  + (f"saved {row['saved_for_backward_mb']:6.0f} MB ({row['saved_for_backward_ratio']:.2f}x)"
                     if "saved_for_backward_mb" in row else "")
                  + (f"point ops {row['point_ops_s']:.3f} s ({100 * row['point_ops_share_of_train']:.1f} % of train)"
                     if "point_ops_s" in row else ""), flush=True)
    smallest = rows[0]["points"]
    for row in rows:
        first = next(r for r in rows if r["preset"] == row["preset"] and r["points"] == smallest)
        row["train_growth_per_point"] = (row["train_s"] / first["train_s"]) / (row["points"] / smallest)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="also the full network at 32k and 80k points")
    parser.add_argument("--reps", type=int, default=3, help="repetitions at 16k (fewer at larger sizes)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (CPU time is summed over them)")
    parser.add_argument("--presets", nargs="+", default=["rpe"] + [p for p in PRESETS if p != "rpe"],
                        choices=sorted(PRESETS))
    parser.add_argument("--batch", type=int, default=1, help="clouds per batch in the network runs (points each)")
    parser.add_argument("--skip-ops", action="store_true")
    parser.add_argument("--skip-layer", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results JSON")
    parser.add_argument("--malloc", choices=("mmap", "default"), default="mmap",
                        help="mmap: every block over 64 KiB mapped, so peak RSS is exact but every large tensor "
                             "costs page faults (about half of the CPU time); default: glibc as in training "
                             "(realistic times, peak RSS meaningless)")
    args = parser.parse_args()
    if args.presets[0] != "rpe":
        args.presets = ["rpe"] + [p for p in args.presets if p != "rpe"]
    torch.set_num_threads(args.threads)
    devices = [torch.device("cpu")] + ([torch.device("cuda")] if torch.cuda.is_available() else [])
    results = {"provenance": provenance(args.threads, ("numpy", "torch", "numba")),   # versions, threads, load
               "machine": {"malloc": os.environ.get("MALLOC_MMAP_THRESHOLD_", "glibc default"),
                           "clouds_per_batch": args.batch},
               "time": "CPU: process CPU time (s), minimum over reps; *_wall_s: wall time; CUDA: wall time",
               "memory": "CPU: peak RSS above the level before the call (1 ms sampling); CUDA: "
                         "max_memory_allocated above the level before the call; layer: also autograd's saved tensors",
               "runs": {}}
    layer_sizes, layer_reps = [16_000, 32_000, 80_000], [args.reps, max(1, args.reps - 1), max(1, args.reps - 2)]
    net_sizes = [16_000, 32_000, 80_000] if args.full else [16_000]
    net_reps = layer_reps if args.full else [max(1, args.reps - 1)]
    for device in devices:
        run = {}
        if not args.skip_ops:
            run["ops"] = bench_ops(device)
            print(json.dumps(run["ops"], indent=1), flush=True)
        if not args.skip_layer:
            run["layer"] = bench_models("layer", layer_sizes, args.presets, layer_reps, device)
        run["network"] = bench_models("network", net_sizes, args.presets, net_reps, device, args.batch)
        results["runs"][device.type] = run
    results["machine"]["load_average_end"] = os.getloadavg()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save_json(args.out, results, indent=1)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
