"""Benchmark: the full network's training step on one device, per positional encoding, and its point ops.

For ``--clouds`` synthetic rooms of ``--points`` points each (``bench_model.synthetic_room``), on
``--device`` (``cuda`` by default), every preset of ``--presets`` runs the training loop's own step
(``engine.step.train_step``) of ``PointTransformerSeg50`` with SGD: the forward under ``--amp``'s autocast
(``train.amp``, build.autocast: CUDA only, float32 on the CPU), the float32 loss, backward (scaled for fp16),
optimiser step:

    given     with the point hierarchy computed beforehand, as the data loader's workers hand it over
    in-model  model(coord, feat, offset): the model builds the hierarchy itself, in line (device default
              backends)
    beside    training's path on CUDA (``engine.ahead.HierarchyAhead``): each batch's copy and hierarchy made
              on a second stream while the previous step runs; steady-state seconds a step over
              ``--beside-steps`` steps (the consumer's stream synchronised after each, as ``loss.item()`` does)

Presets and modes are interleaved, after ``--warmup`` steps each; a step's time is the minimum over
``--reps`` (wall time of ``kernel_check.timed``, the package's one timer), its memory the peak
``torch.cuda.max_memory_allocated()`` above the level before the step (weights, gradients and optimiser
state exist by then; on the CPU: none, see ``bench_model.py``). Point ops, timed alone:

    loader_cpu_s     the hierarchy on the host's CPU (numba FPS, pykdtree), what a loader worker pays per batch
    device_s         the hierarchy with the device's default backends, what ``model(coord, feat, offset)`` pays
    share_in_model   (in-model - given) / in-model step time: the share of point ops in the in-model step
    fps_torch_s      the pure-torch FPS of one cloud (one Python step per sample) on the device, for reference

The hierarchy alone per backend (``--hierarchy-clouds``, default 2 and 16 clouds of ``--points``), side by
side through ``bench_hierarchy.time_hierarchy``: ``cpu`` (the host's numba FPS + pykdtree), the device's
default, and on a GPU the Triton kernels (and torch-cluster where installed), each with its agreement with
the first. What a
loader worker pays per sample (``--loader-samples N``, ``--loader-only`` for that part alone): block
building and the sample's hierarchy, one ``synth --size bench`` room in memory.

If a size does not fit in memory it halves ``--points`` and retries. Writes JSON to ``--out`` after every
preset, so a run cut short keeps what it measured.

``--kernels torch triton`` compares the attention kernels instead (``train_step_kernels.run_kernels``,
``fused_attention.py``):
every preset x kernels x ``--amps`` (float32 ``none`` and ``bf16``) case, given hierarchy, interleaved.
``default`` is the device's default path (``POINTGEOPE_KERNELS`` unset); ``torch_norm`` is that path with torch's
batch norm and ReLU instead of the fused op (``norm.py``, the CUDA default since GPU run 6), so
``--kernels torch_norm default`` times the step with and without it; ``frame_fold`` is the default path with
GeoPE's relation turning the points in its kernel (``frame_fold.py``): ``--kernels default frame_fold --presets
geope`` decides whether the fold becomes the default.

Usage: python bench/bench_train_step.py --out result.json [--device cuda] [--points 80000] [--clouds 2]
       [--amp bf16] [--presets rpe geope lingeope] [--reps 3] [--warmup 2] [--budget 240] [--profile]
       [--hierarchy-clouds 2 16] [--loader-samples N [--loader-only]]
       [--kernels default torch triton [--amps none bf16]]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_io import save_json
from bench_model import synthetic_room
from gpu_record import run_record
from pointgeope.engine import build
from pointgeope.engine.config import Config, OptimConfig, TrainConfig
from pointgeope.engine.state import Learner
from pointgeope.engine.step import train_step
from pointgeope.model import PointTransformerSeg
from pointgeope.model.kernel_check import timed as one_timer
from pointgeope.model.ops import backends, fps
from step_profile import profile, sync as _sync

AMP = ("bf16", "fp16", "none")  # train.amp's values


def timed(fn, device: torch.device) -> tuple[float, float]:
    """(wall seconds of one run through the package's timer ``kernel_check.timed``, peak MiB above the level
    before the call; 0 on the CPU)."""
    if device.type == "cuda":
        _sync(device)
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    seconds = one_timer(fn, device, reps=1, warmup=0)[1][0]
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20 if device.type == "cuda" else 0.0
    return seconds, peak


def sgd_learner(model: torch.nn.Module, amp: str, device: torch.device,
                foreach: bool | None = None) -> tuple[Config, Learner]:
    """The benches' training setup for ``engine.step.train_step``: ``train.amp = amp``, the cross entropy, no
    clipping; SGD (lr 1e-3, momentum 0.9; ``foreach`` as torch's argument, its default on CUDA) at a constant
    learning rate and ``build.grad_scaler``."""
    cfg = Config(train=TrainConfig(amp=amp, loss="ce"), optim=OptimConfig(grad_clip=None))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, foreach=foreach)
    constant = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    return cfg, Learner(model, opt, constant, build.grad_scaler(cfg, device))


def step_batch(coord, feat, offset, label, hierarchy=None) -> SimpleNamespace:
    """What ``train_step`` reads of a loader's batch: ``pos``, ``x``, ``ptr`` (0 then ``offset``), ``y``,
    ``hierarchy`` (None: the model builds it)."""
    ptr = torch.cat([offset.new_zeros(1), offset])
    return SimpleNamespace(pos=coord, x=feat, ptr=ptr, y=label, hierarchy=hierarchy)


class Case:
    """One preset's model, SGD optimiser (constant learning rate) and the training loop's own step
    (``engine.step.train_step``: ``train.amp``'s autocast and grad scaler, the float32 cross entropy, backward,
    optimiser step) on fixed inputs."""

    def __init__(self, preset: str, inputs: dict, amp: str, device: torch.device):
        torch.manual_seed(0)
        self.model = PointTransformerSeg(pe=preset).to(device).train()
        self.cfg, self.learner = sgd_learner(self.model, amp, device)
        self.inputs, self.device = inputs, device
        x = inputs
        self.batches = {given: step_batch(x["coord"], x["feat"], x["offset"], x["label"],
                                          x["hierarchy"] if given else None)
                        for given in (True, False)}

    def step(self, given: bool) -> None:
        self._train(self.batches[given])

    def _train(self, batch) -> float:
        return train_step(self.cfg, self.learner, self.model, batch, self.device)[1]

    def beside(self, steps: int) -> float:
        """Steady-state seconds a step with each batch's hierarchy made beside the previous step
        (``HierarchyAhead`` over ``steps + 1`` copies of the CPU batch; the first step is not counted)."""
        from pointgeope.engine.ahead import HierarchyAhead

        batches = [self.inputs["cpu_batch"]] * (steps + 1)
        times, start = [], None
        # a steady-state timer, not kernel_check.timed: its device-wide synchronize before each step would wait
        # for the next batch's hierarchy on the side stream, the overlap measured here
        for batch in HierarchyAhead(batches, self.model.hierarchy_spec, self.device):
            self._train(batch)
            if self.device.type == "cuda":
                torch.cuda.current_stream(self.device).synchronize()
            now = time.perf_counter()
            if start is not None:
                times.append(now - start)
            start = now
        return sum(times) / len(times)


def make_inputs(points: int, clouds: int, device: torch.device, spec) -> dict:
    coord_cpu = torch.cat([synthetic_room(points, seed=10 + b) for b in range(clouds)])
    offset_cpu = torch.arange(1, clouds + 1) * points
    g = torch.Generator().manual_seed(0)
    feat = torch.cat([torch.rand(coord_cpu.shape[0], 3, generator=g), coord_cpu], dim=1)
    label = torch.randint(0, 13, (coord_cpu.shape[0],), generator=g)
    start = time.perf_counter()
    hierarchy = spec(coord_cpu, offset_cpu)                     # what a loader worker computes
    loader_cpu_s = time.perf_counter() - start
    from pointgeope.data.points import Points, collate

    bounds = [0] + offset_cpu.tolist()
    cpu_batch = collate([Points(pos=coord_cpu[a:b], x=feat[a:b], y=label[a:b])     # the loader's batch
                         for a, b in zip(bounds[:-1], bounds[1:], strict=True)])
    cpu_batch = cpu_batch.pin_memory() if device.type == "cuda" else cpu_batch
    return {"coord": coord_cpu.to(device), "feat": feat.to(device), "offset": offset_cpu.to(device),
            "label": label.to(device), "hierarchy": hierarchy.to(device), "coord_cpu": coord_cpu,
            "offset_cpu": offset_cpu, "loader_cpu_s": loader_cpu_s, "cpu_batch": cpu_batch}


def point_ops(inputs: dict, spec, device: torch.device, reps: int) -> dict:
    out = {"loader_cpu_s": inputs["loader_cpu_s"], "device_backends": backends.summary(device)}
    cpu_times, dev_times = [], []
    for _ in range(reps):
        start = time.perf_counter()
        spec(inputs["coord_cpu"], inputs["offset_cpu"])
        cpu_times.append(time.perf_counter() - start)
        dev_times.append(timed(lambda: spec(inputs["coord"], inputs["offset"]), device)[0])
    out["loader_cpu_s"] = min(cpu_times + [out["loader_cpu_s"]])
    out["device_s"] = min(dev_times)
    first = inputs["coord"][: int(inputs["offset_cpu"][0])]
    off = torch.tensor([first.shape[0]], device=device)
    out["fps_torch_points"] = int(first.shape[0])
    out["fps_torch_s"] = timed(lambda: fps(first, off, 4, backend="torch"), device)[0]
    return out


def hierarchy_backends(args, device: torch.device, out: dict, write) -> dict:
    """The hierarchy alone per backend and per batch of ``--hierarchy-clouds`` x ``--points``, side by side:
    ``cpu`` (numba FPS + pykdtree on the host, what a loader worker pays), the device's default and, on a
    GPU, the Triton kernels and torch-cluster where installed (``bench_hierarchy.time_hierarchy``, the one
    owner of that measurement; pure torch is left out: about a minute per 80k cloud on a CPU)."""
    from bench_hierarchy import time_hierarchy

    labels = ["cpu", "default"] + ([] if device.type == "cpu" else
                                   ["triton"] + (["cluster"] if backends.available("cluster") else []))
    for clouds in args.hierarchy_clouds:
        out[f"{clouds}x{args.points}"] = time_hierarchy(labels, clouds, args.points, device, reps=args.reps)
        write()                                             # a run cut short keeps the batches measured
        print(f"hierarchy {clouds} x {args.points}: " + json.dumps(out[f"{clouds}x{args.points}"]), flush=True)
    return out


def loader_sample_costs(args) -> dict:
    """What a loader worker pays per training sample, on this host's CPU, one thread: building the block
    from a room already in memory (``S3DISTrain.__getitem__`` without the read: the ptv1 augmentations,
    grid sampling, the ``voxel_max`` crop, ``ToData``) and, with ``data.hierarchy: loader``, the sample's
    hierarchy (numba FPS, pykdtree). The room: ``synth --size bench`` Area_5 room 1 (about 0.85M points)."""
    import numpy as np

    from data_prep.synth.dataset import synth_room
    from pointgeope.data.dataset import room_sample, sample_rng
    from pointgeope.data.transforms import ToData, s3dis_train_transform, shift_to_origin, take_points
    from pointgeope.data.voxelize import random_crop, voxel_sample

    room = synth_room("bench", 5, 0)
    coord, color = room.coord(), room.rgb
    label = np.zeros(coord.shape[0], np.uint8)
    transform, to_data, spec = s3dis_train_transform("ptv1"), ToData(), PointTransformerSeg().hierarchy_spec
    blocks, hierarchies, sizes = [], [], []
    for index in range(args.loader_samples):
        start = time.perf_counter()
        rng = sample_rng(0, 0, index)
        sample = transform(room_sample(coord, color, label), rng)
        keep = voxel_sample(sample["coord"], 0.04, rng)
        keep = keep[random_crop(np.take(sample["coord"], keep, axis=0), 80_000, rng)]
        data = to_data(shift_to_origin(take_points(sample, keep[rng.permutation(keep.shape[0])])))
        blocks.append(time.perf_counter() - start)
        start = time.perf_counter()
        spec(data.pos, torch.tensor([data.pos.shape[0]]))
        hierarchies.append(time.perf_counter() - start)
        sizes.append(int(data.pos.shape[0]))
    return {"room_points": int(coord.shape[0]), "sample_points": sizes, "threads": torch.get_num_threads(),
            "block_s": [round(t, 4) for t in blocks], "hierarchy_s": [round(t, 4) for t in hierarchies],
            "block_median_s": round(float(np.median(blocks)), 4),
            "hierarchy_median_s": round(float(np.median(hierarchies)), 4)}


def run(args, out: dict, write) -> None:
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda but torch.cuda.is_available() is False")
    amp = args.amp
    points = args.points
    spec = PointTransformerSeg().hierarchy_spec
    while True:
        try:
            inputs = make_inputs(points, args.clouds, device, spec)
            cases = {pe: Case(pe, inputs, amp, device) for pe in args.presets}
            for case in cases.values():                  # warm-up (kernels, allocator, cuDNN choices)
                for _ in range(args.warmup):
                    case.step(given=True)
            break
        except torch.cuda.OutOfMemoryError:
            cases = inputs = None
            torch.cuda.empty_cache()
            if points <= 1000:
                raise
            print(f"out of memory at {args.clouds} x {points} points: halving", flush=True)
            points //= 2
    deadline = time.perf_counter() + args.budget        # the reps' budget starts after the inputs and warm-up
    if args.warm_only:                                  # compile every kernel of the modes, time nothing
        for case in cases.values():
            case.step(given=False)
            case.beside(1) if args.beside_steps else None
        return
    out.update({"points_per_cloud": points, "clouds": args.clouds, "amp": args.amp, "presets": {}})
    modes = ("given",) if args.no_in_model else ("given", "in_model")
    times = {pe: {m: [] for m in modes + ("beside",)} for pe in args.presets}
    peaks = {pe: {m: 0.0 for m in modes} for pe in args.presets}
    for rep in range(args.reps):
        for pe, case in cases.items():
            for mode in modes:
                if rep and time.perf_counter() > deadline:   # out of budget: keep what is measured
                    continue
                seconds, peak = timed(lambda: case.step(given=mode == "given"), device)  # noqa: B023 - run at once
                times[pe][mode].append(seconds)
                peaks[pe][mode] = max(peaks[pe][mode], peak)
            if args.beside_steps and not (rep and time.perf_counter() > deadline):
                times[pe]["beside"].append(case.beside(args.beside_steps))
            row = {f"{m}_s": min(v) for m, v in times[pe].items() if v}
            row.update({f"{m}_peak_mib": peaks[pe][m] for m in peaks[pe]}, reps=len(times[pe]["given"]))
            out["presets"][pe] = row
        write()
        print(f"rep {rep + 1}/{args.reps}: " + "  ".join(
            f"{pe} {r.get('given_s', float('nan')):.3f} s" for pe, r in out["presets"].items()), flush=True)
    base = out["presets"][args.presets[0]]
    for row in out["presets"].values():
        for key in ("given_s", "in_model_s", "beside_s", "given_peak_mib", "in_model_peak_mib"):
            if row.get(key) and base.get(key):
                row[key.replace("_s", "").replace("_mib", "") + "_ratio"] = row[key] / base[key]
        if row.get("in_model_s") and row.get("given_s"):
            row["point_ops_share_in_model"] = max(0.0, row["in_model_s"] - row["given_s"]) / row["in_model_s"]
        if row.get("beside_s") and row.get("given_s"):
            row["beside_over_given"] = row["beside_s"] / row["given_s"]
    if not args.no_point_ops:
        out["point_ops"] = point_ops(inputs, spec, device, reps=2)
    if args.profile:
        out["profile"] = {pe: profile(lambda: case.step(given=True), device)  # noqa: B023 - run at once
                          for pe, case in cases.items()}
    write()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--points", type=int, default=80_000, help="points per cloud (halved until it fits)")
    parser.add_argument("--clouds", type=int, default=2)
    parser.add_argument("--amp", choices=sorted(AMP), default="bf16")
    parser.add_argument("--presets", nargs="+", default=["rpe", "geope", "lingeope"])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--budget", type=float, default=240.0,
                        help="seconds from the end of the warm-up after which no new rep starts (the first always "
                             "runs)")
    parser.add_argument("--profile", action="store_true", help="also the top kernels of one step per preset")
    parser.add_argument("--loader-samples", type=int, default=0,
                        help="also time what a loader worker pays per sample (block, hierarchy) on N samples")
    parser.add_argument("--loader-only", action="store_true", help="only the --loader-samples part (no step)")
    parser.add_argument("--hierarchy-clouds", type=int, nargs="*", default=[2, 16],
                        help="batch sizes (clouds of --points) of the hierarchy-per-backend part (none: skip it)")
    parser.add_argument("--kernels", nargs="+", choices=("default", "torch_norm", "frame_fold", "torch", "triton"),
                        help="compare attention kernels instead (run_kernels), at every precision of --amps")
    parser.add_argument("--amps", nargs="+", choices=sorted(AMP), default=["none", "bf16"])
    parser.add_argument("--beside-steps", type=int, default=4,
                        help="steps of the 'beside' mode a rep (0: skip it; the hierarchy on a second stream)")
    parser.add_argument("--no-in-model", action="store_true", help="skip the in-model (in line) mode")
    parser.add_argument("--no-point-ops", action="store_true", help="skip the point ops timed alone")
    parser.add_argument("--warm-only", action="store_true",
                        help="only compile the kernels of every mode (one step each; Triton's cache keeps them)")
    args = parser.parse_args()
    if args.presets[0] != "rpe":
        args.presets = ["rpe"] + [p for p in args.presets if p != "rpe"]
    out = {"device": args.device, "run": run_record(args.device), "torch_threads": torch.get_num_threads(),
           "time": "wall seconds of one training step (SGD), minimum over reps, presets interleaved",
           "memory": "peak max_memory_allocated above the level before the step (CUDA only), MiB"}

    def write() -> None:
        save_json(args.out, out, indent=1)

    if args.loader_samples:
        out["loader_per_sample"] = loader_sample_costs(args)
        write()
    if args.loader_only:
        print(json.dumps(out["loader_per_sample"], indent=1))
        return 0
    if args.kernels:
        from train_step_kernels import run_kernels  # the kernels' comparison, its own module
        run_kernels(args, out, write)
    else:
        run(args, out, write)
    if args.hierarchy_clouds and not args.kernels:
        out["hierarchy"] = {}
        hierarchy_backends(args, torch.device(args.device), out["hierarchy"], write)
    print(json.dumps(out, indent=1), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
