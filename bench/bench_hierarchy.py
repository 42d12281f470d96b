"""Benchmark: the network's point hierarchy (FPS, kNN, 3-NN of every stage) per ops backend, side by side.

PTv1's S3DIS layout (strides 1, 4, 4, 4, 4; k = 8, 16, 16, 16, 16) on ``--clouds`` synthetic rooms of
``--points`` points each, one point per 4 cm voxel (``bench_model.synthetic_room``), packed in one batch
on ``--device``. Backends (labels):

    cpu       fpsample + pykdtree on the host: what a data loader worker pays (coordinates copied to the host)
    default   the device's default backends (on CUDA: the Triton kernels where Triton imports)
    triton    the Triton kernels (CUDA tensors; on the CPU only under TRITON_INTERPRET=1, far too slow to time)
    cluster   torch-cluster, where installed
    torch     pure torch (kNN by chunked brute force, FPS one Python step per sample: slow)

A backend's time is the minimum over ``--reps`` of the wall time of one hierarchy between device
synchronisations, after ``--warmup`` calls (the first Triton call compiles its kernels). ``agree`` is the
share of stage-0 neighbourhoods (independent of FPS) whose sets equal those of the first backend timed,
and ``same_samples`` whether the FPS samples of every stage are equal. A backend that cannot run is
recorded with its error and the run goes on. Results go to ``--out`` (JSON, rewritten after every case).

Usage: python bench/bench_hierarchy.py --out bench/results/hierarchy.json [--device cuda] [--clouds 2 16]
       [--points 80000] [--backends cpu default triton] [--reps 5] [--warmup 1] [--threads N]
Other scripts call ``time_hierarchy(backends, clouds, points, device)``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_model import synthetic_room  # noqa: E402

from pointgeope.model.ops import HierarchySpec, OpsBackends  # noqa: E402

STRIDES, NEIGHBOURS = (1, 4, 4, 4, 4), (8, 16, 16, 16, 16)
LABELS = {"cpu": OpsBackends(), "default": OpsBackends(), "triton": OpsBackends("triton", "triton"),
          "cluster": OpsBackends("cluster", "cluster"), "torch": OpsBackends("torch", "torch")}


def batch(clouds: int, points: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``clouds`` synthetic rooms of ``points`` points, packed: ``coord (clouds * points, 3)``, ``offset``."""
    coord = torch.cat([synthetic_room(points, seed=c) for c in range(clouds)])
    return coord, torch.arange(1, clouds + 1) * points


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _run(label: str, coord: torch.Tensor, offset: torch.Tensor, device: torch.device):
    """One hierarchy with ``label``'s backends; ``cpu`` copies the coordinates to the host first."""
    spec = HierarchySpec(STRIDES, NEIGHBOURS, LABELS[label])
    if label == "cpu":
        return spec(coord.to("cpu"), offset.to("cpu"))
    return spec(coord, offset)


def _agreement(h, ref) -> dict:
    same = (h.neighbours[0].sort(1).values.cpu() == ref.neighbours[0].sort(1).values.cpu()).all(1)
    samples = all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(h.samples[1:], ref.samples[1:]))
    return {"agree": round(same.float().mean().item(), 6), "same_samples": samples}


def time_hierarchy(backends: list[str], clouds: int, points: int, device: str | torch.device, reps: int = 5,
                   warmup: int = 1) -> dict[str, dict]:
    """Seconds of one hierarchy (minimum over ``reps``) per backend label of ``LABELS``, with the agreement
    of each with the first label that ran; ``{"error": ...}`` for a backend that cannot run."""
    device = torch.device(device)
    coord, offset = batch(clouds, points)
    coord, offset = coord.to(device), offset.to(device)
    out, ref = {}, None
    for label in backends:
        try:
            for _ in range(warmup):
                _run(label, coord, offset, device)
            times = []
            for _ in range(reps):
                _sync(device)
                start = time.perf_counter()
                h = _run(label, coord, offset, device)
                _sync(device)
                times.append(time.perf_counter() - start)
        except (ValueError, RuntimeError, ImportError) as err:
            out[label] = {"error": f"{type(err).__name__}: {err}".splitlines()[0]}
            continue
        out[label] = {"seconds": min(times), "all_seconds": times}
        ref = h if ref is None else ref
        out[label].update(_agreement(h, ref))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--clouds", type=int, nargs="+", default=[2, 16])
    parser.add_argument("--points", type=int, default=80_000)
    parser.add_argument("--backends", nargs="+", default=["cpu", "default", "triton"], choices=sorted(LABELS))
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    from pointgeope.info import device_summary

    result = {"device": args.device, "device_summary": device_summary(), "torch": torch.__version__,
              "cpu_threads": torch.get_num_threads(), "points": args.points, "strides": STRIDES,
              "neighbours": NEIGHBOURS, "cases": {}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for clouds in args.clouds:
        result["cases"][f"{clouds}x{args.points}"] = time_hierarchy(args.backends, clouds, args.points, args.device,
                                                                    args.reps, args.warmup)
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=2))
        tmp.replace(args.out)
        print(json.dumps({f"{clouds}x{args.points}": result["cases"][f"{clouds}x{args.points}"]}), flush=True)


if __name__ == "__main__":
    main()
