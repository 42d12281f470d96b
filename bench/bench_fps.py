"""Benchmark: the data loader's farthest point sampling against a bare ``fpsample`` bucket FPS, in one run.

The loader's FPS is ``fps(points, offset, 4)`` with the CPU default backend (``numba``: the bucket tree of
``pointgeope/model/ops/bucket_fps.py``, exact from the cloud's first point), called as the loader calls it
(a float32 tensor in, an int64 tensor out). The baseline is the bare library call the issue names,
``fpsample.bucket_fps_kdline_sampling(points, 20000, h=7)`` on the same numpy array; for context also the
wrapper the loader used before (fpsample with ``h = 9``, ``start_idx=0`` and the tensor conversions), which
starts from a point of fpsample's own order. 80k -> 20k points on two clouds: ``room`` (the synthetic
furnished room of ``bench_model.synthetic_room``, one point per 4 cm voxel, what a training crop looks
like) and ``uniform`` (80k points uniform in a 10 x 8 x 3 m box).

Each thread setting runs in its own process (``--threads 1 2``: one thread, and both cores of this
machine; ``torch``, numba and fpsample's pools all capped by the environment), and within it the variants
are interleaved (``bench/interleave.py``): ``--rounds`` rounds, each timing every variant once, in an order
rotated each round, after one warm-up call each. Against the bare call, ``interleave.paired`` gives
``ratio_of_mins = min(loader) / min(bare)`` and the median and range of the per-round ratios
(``paired_median``, ``paired_range``; runs before this file used ``interleave`` wrote the median as
``median_paired_ratio``). At one thread the run also
times the loader's FPS per leaf size (``--leaves``) and checks its sequence against the ``torch`` backend
(the definition) on the room.

Usage: python bench/bench_fps.py [--out bench/results/bench_fps.json] [--rounds 15] [--threads 1 2]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import interleave
from bench_io import provenance, save_json
from pointgeope.plural import counted

ROOT = Path(__file__).resolve().parents[1]
N, M = 80_000, 20_000


def clouds() -> dict:
    import numpy as np
    import torch

    sys.path.insert(0, str(ROOT / "bench"))
    from bench_model import synthetic_room

    uniform = np.random.default_rng(0).random((N, 3)) * np.array([10.0, 8.0, 3.0])
    return {"room": synthetic_room(N, seed=1), "uniform": torch.tensor(uniform, dtype=torch.float32)}


def variants(points) -> dict:
    """``name -> callable`` of every timed variant on one cloud (a float32 ``(N, 3)`` tensor)."""
    import fpsample
    import numpy as np
    import torch

    from pointgeope.model.ops import fps

    array, offset = points.numpy(), torch.tensor([N])

    def old_wrapper():
        sel = fpsample.bucket_fps_kdline_sampling(points.detach().to("cpu", torch.float32).numpy(), M, h=9, start_idx=0)
        return torch.from_numpy(np.asarray(sel, dtype=np.int64)).to(points.device)

    return {"bare_fpsample_h7": lambda: fpsample.bucket_fps_kdline_sampling(array, M, h=7),
            "loader": lambda: fps(points, offset, 4)[0], "old_wrapper_fpsample_h9": old_wrapper}


def leaves_and_check(points, leaves: list[int]) -> dict:
    """One-thread extras on the room: the loader's FPS per leaf size, and its sequence against ``torch``."""
    import torch

    from pointgeope.model.ops import fps
    from pointgeope.model.ops.bucket_fps import bucket_fps

    array = points.numpy()
    fns = {f"leaf_{leaf}": (lambda leaf=leaf: bucket_fps(array, [N], [M], leaf=leaf)) for leaf in leaves}
    per_leaf = {name: round(min(t), 5) for name, t in interleave.rounds(fns, 5)[1].items()}
    loader = fps(points, torch.tensor([N]), 4)[0]
    reference = fps(points, torch.tensor([N]), 4, backend="torch")[0]
    return {"seconds_per_leaf": per_leaf, "loader_equals_torch_backend": bool(torch.equal(loader, reference)),
            "first_samples": {"loader": loader[:3].tolist(),
                              "bare_fpsample_h7": [int(i) for i in variants(points)["bare_fpsample_h7"]()[:3]]}}


def worker(args) -> dict:
    import torch

    threads = args.threads[0]
    torch.set_num_threads(threads)
    data = clouds()
    result = {"threads": threads, "clouds": {}}
    for name, points in data.items():
        _, wall, _ = interleave.rounds(variants(points), args.rounds)
        result["clouds"][name] = interleave.paired(wall, "bare_fpsample_h7")
    if threads == 1:
        result["room_extras"] = leaves_and_check(data["room"], args.leaves)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "bench_fps.json"))
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--leaves", type=int, nargs="+", default=[16, 32, 64, 128])
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args)))
        return
    run = provenance(args.threads, ("numpy", "torch", "numba", "fpsample"))
    runs = []
    for threads in args.threads:
        env = dict(os.environ, OMP_NUM_THREADS=str(threads), NUMBA_NUM_THREADS=str(threads),
                   RAYON_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
        cmd = [sys.executable, __file__, "--worker", "--threads", str(threads), "--rounds", str(args.rounds),
               "--leaves", *map(str, args.leaves)]
        out = subprocess.run(cmd, env=env, check=True, stdout=subprocess.PIPE, text=True).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
        for cloud, table in runs[-1]["clouds"].items():
            print(f"{counted(threads, 'thread')}, {cloud}: " + ", ".join(
                f"{name} {row['min_s']:.4f} s ({row['ratio_of_mins']:.2f}x, paired {row['paired_median']:.2f}x)"
                for name, row in table.items()), flush=True)
    result = {"points": N, "samples": M, "rounds": args.rounds, "provenance": run, "load_average": os.getloadavg(),
              "runs": runs}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    save_json(Path(args.out), result, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
