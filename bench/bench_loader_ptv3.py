"""A loader worker's cost per training sample: PTv3's pipeline (``data.augment: pointcept_ptv3``) against PTv1's.

One thread, from the ``synth --size bench`` Area_5 room 1 in memory (about 0.85M points), the dataset's
``__getitem__`` without the read: PTv1 (its augmentations, grid 0.04 m, the 80k crop, ``ToData``) and PTv3
(``ptv3_train_transform``: grid 0.02 m, the 60 % sphere crop, at most 204,800 points, ``ptv3_data``) with
features ``[rgb | xyz]`` (``ptv3``, ``data.normal: false``) and ``[rgb | normal]`` (``ptv3_normal``, the recipe's:
the room's normals, estimated once before the timing and stored float16 as prepare stores them, cast to float32,
turned and flipped with the points as the dataset does), one sample of each in turn (interleaved, so a busy
machine slows all alike), the first of each dropped. PTv1's samples need their point hierarchy as well
(``bench_train_step.py --loader-only`` measures it); PTv3's need none. Medians; their ratios are the figures to
read.

    python bench/bench_loader_ptv3.py --samples 8 --out bench/results/bench_loader_ptv3.json
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_io import provenance, save_json
from data_prep.synth.dataset import synth_room
from pointgeope.data.dataset import room_sample, sample_rng
from pointgeope.data.normals import estimate_normals
from pointgeope.data.ptv3_dataset import ptv3_data
from pointgeope.data.ptv3_transforms import ptv3_train_transform
from pointgeope.data.transforms import ToData, s3dis_train_transform, shift_to_origin, take_points
from pointgeope.data.voxelize import random_crop, voxel_sample
from pointgeope.plural import counted


def ptv1_sample(coord, color, label, index: int):
    rng = sample_rng(0, 0, index)
    sample = s3dis_train_transform("ptv1")(room_sample(coord, color, label), rng)
    keep = voxel_sample(sample["coord"], 0.04, rng)
    keep = keep[random_crop(np.take(sample["coord"], keep, axis=0), 80_000, rng)]
    return ToData()(shift_to_origin(take_points(sample, keep[rng.permutation(keep.shape[0])])))


def ptv3_sample(coord, color, label, index: int, normal=None):
    """``normal``: the room's ``(N, 3)`` float16 normals for ``[rgb | normal]``, as ``S3DISTrainPTv3`` reads them."""
    rng = sample_rng(0, 0, index)
    sample = room_sample(coord, color, label)
    if normal is not None:
        sample["normal"] = np.asarray(normal, dtype=np.float32)
    return ptv3_data(ptv3_train_transform()(sample, rng), mix_draw=float(rng.random()), normal=normal is not None)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=8, help="samples of each pipeline; the first is dropped")
    parser.add_argument("--out", type=Path, default=Path("bench/results/bench_loader_ptv3.json"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    run = provenance(1, ("numpy", "torch", "numba"))       # at the start: the code this run imports
    room = synth_room("bench", 5, 0)              # Area_5's first room
    coord, color = room.coord(), room.rgb
    label = np.zeros(coord.shape[0], np.uint8)
    start = time.perf_counter()
    normal = estimate_normals(coord).astype(np.float16)     # prepare's, once, outside the timing
    estimate_s = time.perf_counter() - start
    makes = {"ptv1": ptv1_sample, "ptv3": ptv3_sample,
             "ptv3_normal": lambda c, rgb, y, i: ptv3_sample(c, rgb, y, i, normal)}
    times: dict[str, list[float]] = {name: [] for name in makes}
    points: dict[str, list[int]] = {name: [] for name in makes}
    for index in range(args.samples):
        for name, make in makes.items():
            start = time.perf_counter()
            data = make(coord, color, label, index)
            times[name].append(time.perf_counter() - start)
            points[name].append(int(data.pos.shape[0]))
    med = {name: float(np.median(t[1:])) for name, t in times.items()}
    out = {"provenance": run, "room_points": int(coord.shape[0]), "load_average_end": list(os.getloadavg()),
           "time": "seconds per training sample from a room in memory, one thread, median without the first; "
                   "on a shared machine (provenance, load_average_end) read the ratios, not the seconds",
           "normal_estimate_s": round(estimate_s, 2),
           "median_s": {k: round(v, 4) for k, v in med.items()}, "ptv3_over_ptv1": round(med["ptv3"] / med["ptv1"], 3),
           "ptv3_normal_over_ptv3": round(med["ptv3_normal"] / med["ptv3"], 3),
           "sample_points": points, "all_s": {k: [round(x, 4) for x in t] for k, t in times.items()}}
    save_json(args.out, out)
    print(f"ptv1 {med['ptv1']:.3f} s, ptv3 {med['ptv3']:.3f} s per sample ({out['ptv3_over_ptv1']}x), "
          f"ptv3 [rgb | normal] {med['ptv3_normal']:.3f} s ({out['ptv3_normal_over_ptv3']}x [rgb | xyz]), "
          f"room {counted(coord.shape[0], 'point')}, samples {int(np.median(points['ptv1'])):,} / "
          f"{int(np.median(points['ptv3'])):,}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
