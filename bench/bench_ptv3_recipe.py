"""The ``--recipe`` mode of ``bench/bench_ptv3_step.py`` (its docstring says what is measured): PTv3's recipe
step per encoding and precision, on crops of a synthetic room, with time and peak memory per case."""
from __future__ import annotations

import argparse
import statistics
import sys
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import torch

from bench_io import provenance, save_json
from bench_train_step import timed
from data_prep.synth.dataset import synth_room
from pointgeope.data.dataset import room_sample, sample_rng
from pointgeope.data.ptv3_dataset import ptv3_data
from pointgeope.data.ptv3_transforms import ptv3_train_transform
from pointgeope.engine import build
from pointgeope.engine.config import load_config
from pointgeope.engine.state import Learner
from pointgeope.engine.step import train_step
from step_profile import profile

REPO = Path(__file__).resolve().parents[1]
MIB = 2 ** 20


def case_config(encoding: str) -> tuple[str, list[str]]:
    """The recipe's config of ``encoding`` and its overrides: ``configs/s3dis/ptv3_<encoding>.yaml`` (``none``: the
    published network, head width 16); ``none18`` is ``none`` at the comparison's widths (head width 18, those of
    every encoding's config: ``ptv3_geope.yaml`` with ``model.pe=none``, the ablation's preset)."""
    if encoding == "none18":
        return "configs/s3dis/ptv3_geope.yaml", ["model.pe=none"]
    return f"configs/s3dis/ptv3_{encoding}.yaml", []


def case_label(encoding: str) -> str:
    """The config of ``encoding`` as a command line would give it: ``path [overrides]``."""
    path, own = case_config(encoding)
    return " ".join([path, *own])


def recipe_batch(size: str, clouds: int, seed: int = 0, point_max: int = 204_800) -> SimpleNamespace:
    """``clouds`` training crops of the ``synth --size`` room through ``ptv3_train_transform`` (each its own
    generator; at most ``point_max`` points, the recipe's 204,800), packed as ``train_step`` reads a batch:
    ``pos`` (N, 3), ``x`` (N, 6) ``[rgb | xyz]``, ``grid_coord`` (N, 3), ``ptr`` (B + 1,), ``y`` (N,) labels
    drawn uniformly from the 13 classes (the room has none; the Lovasz term then sees every class, as an S3DIS
    batch nearly does)."""
    room = synth_room(size, 5, 0)                 # Area_5's first room
    coord, color = room.coord(), room.rgb
    transform = ptv3_train_transform(point_max=point_max)
    parts = [ptv3_data(transform(room_sample(coord, color), sample_rng(seed, i))) for i in range(clouds)]
    counts = torch.tensor([len(p.pos) for p in parts])
    g = torch.Generator().manual_seed(seed)
    return SimpleNamespace(pos=torch.cat([p.pos for p in parts]), x=torch.cat([p.x for p in parts]),
                           grid_coord=torch.cat([p.grid_coord for p in parts]),
                           ptr=torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(counts, 0)]),
                           y=torch.randint(0, 13, (int(counts.sum()),), generator=g))


def to_device(batch: SimpleNamespace, device: torch.device) -> SimpleNamespace:
    return SimpleNamespace(**{k: v.to(device) for k, v in vars(batch).items()})


class Network:
    """One encoding's network and optimiser, as the recipe builds them; ``cfg(amp)`` its config at a precision."""

    def __init__(self, encoding: str, overrides: list[str], device: torch.device):
        self.encoding, self.overrides, self.device = encoding, overrides, device
        cfg = self.cfg("none")
        torch.manual_seed(0)
        net = build.model(cfg).to(device).train()
        opt = build.optimizer(cfg, net)
        self.learner = Learner(net, opt, build.scheduler(cfg, opt, steps_per_epoch=1000),
                               build.grad_scaler(cfg, device))
        self.parameters = sum(p.numel() for p in net.parameters())

    def cfg(self, amp: str):
        path, own = case_config(self.encoding)
        return load_config(REPO / path, [*own, f"train.amp={amp}", *self.overrides])

    def state_mib(self) -> float:
        """Parameters, gradients and the optimiser's state, MiB."""
        tensors = list(self.learner.model.parameters()) + \
                  [p.grad for p in self.learner.model.parameters() if p.grad is not None] + \
                  [t for s in self.learner.optimizer.state.values() for t in s.values() if torch.is_tensor(t)]
        return sum(t.numel() * t.element_size() for t in tensors) / MIB


def one_step(net: Network, cfg, batch: SimpleNamespace) -> dict:
    """One timed training step of ``net`` with ``cfg`` (its precision): seconds, peak memory, loss (an
    out-of-memory error is returned as ``error``, after the step's memory is given back)."""
    loss = []
    try:
        seconds, above = timed(lambda: loss.append(train_step(cfg, net.learner, net.learner.model, batch,
                                                              net.device)[1]), net.device)
    except torch.cuda.OutOfMemoryError as err:       # with the peak it had reached, MiB
        message = (f"out of memory at {torch.cuda.max_memory_allocated() / MIB:.0f} MiB allocated: "
                   f"{str(err).splitlines()[0][:200]}")
    else:
        row = {"seconds": seconds, "loss": loss[-1]}
        if net.device.type == "cuda":
            row.update(peak_mib=torch.cuda.max_memory_allocated() / MIB, peak_step_mib=above)
        return row
    net.learner.optimizer.zero_grad(set_to_none=True)      # the failed step's frames are gone by now
    torch.cuda.empty_cache()
    return {"error": message}


def saved_bytes(net: Network, amp: str, batch: SimpleNamespace) -> int:
    """Bytes of the tensors the forward of one training step keeps for its backward (autograd's saved tensors,
    each storage once) under ``amp``'s autocast, also on the CPU (where ``train.amp`` would not cast): the
    activation memory a GPU's step keeps, counted anywhere."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        seen.setdefault(storage.data_ptr(), storage.nbytes())
        return t

    model = net.learner.model
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), \
            torch.autocast(net.device.type, dtype=dtype or torch.bfloat16, enabled=dtype is not None):
        model(batch.pos, batch.x, batch.ptr[1:], grid_coord=batch.grid_coord)
    return sum(seen.values())


def profiled(net: Network, cfg, batch: SimpleNamespace) -> dict:
    """One more step of a case under torch's profiler (``step_profile.profile``: its top kernels, on CUDA the
    GPU's busy share) and, on CUDA, the times the host waited for the device in one step (the warnings of
    ``torch.cuda.set_sync_debug_mode``, counted)."""
    def step():
        train_step(cfg, net.learner, net.learner.model, batch, net.device)
    row = profile(step, net.device)
    if net.device.type == "cuda":
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                step()
            finally:
                torch.cuda.set_sync_debug_mode(0)
        row["host_syncs"] = sum("synchroniz" in str(w.message) for w in caught)
    return row


def summarise(cases: dict, encodings: list[str], amps: list[str]) -> None:
    """Per case: the median step of the timed rounds, peaks (the largest), ratios (medians of the same rounds)
    to ``none`` (the published widths), to ``none18`` (the same widths as the encodings') at the same precision,
    and to float32 of the same encoding."""
    for row in cases.values():
        timed_s = row["steps_s"]
        row["step_s"] = statistics.median(timed_s) if timed_s else None
        for key in ("peak_mib", "peak_step_mib"):
            if row.get(f"{key}_all"):
                row[key] = max(row[f"{key}_all"])
    for pe in encodings:
        for amp in amps:
            row, none, f32 = cases[f"{pe}/{amp}"], cases.get(f"none/{amp}", {}), cases.get(f"{pe}/none", {})
            if row["step_s"] and none.get("step_s"):
                row["vs_none_time"] = row["step_s"] / none["step_s"]
            same = cases.get(f"none18/{amp}", {})
            if row["step_s"] and same.get("step_s"):
                row["vs_none18_time"] = row["step_s"] / same["step_s"]
            if row.get("peak_step_mib") and same.get("peak_step_mib"):
                row["vs_none18_memory"] = row["peak_step_mib"] / same["peak_step_mib"]
            if row["step_s"] and f32.get("step_s") and amp != "none":
                row["vs_float32_time"] = row["step_s"] / f32["step_s"]
            if row.get("peak_step_mib") and f32.get("peak_step_mib") and amp != "none":
                row["vs_float32_memory"] = row["peak_step_mib"] / f32["peak_step_mib"]


def one_round(cases: dict, nets: dict, cfgs: dict, batch: SimpleNamespace, warmup: bool) -> None:
    """One step of every case still running (``cases`` keys ``encoding/amp``), recorded in its row."""
    for key, row in cases.items():
        if "error" in row:
            continue
        pe, amp = key.split("/")
        got = one_step(nets[pe], cfgs[pe, amp], batch)
        if "error" in got:
            row["error"] = got["error"]
            continue
        row["warmup_s" if warmup else "steps_s"].append(got["seconds"])
        row["loss"] = got["loss"]
        for name in ("peak_mib", "peak_step_mib"):
            if name in got:
                row.setdefault(f"{name}_all", []).append(got[name])
        row["state_mib"] = nets[pe].state_mib()


def run_recipe(args: argparse.Namespace, small: list[str]) -> dict:
    """The recipe mode (module docstring of ``bench_ptv3_step.py``); writes ``args.out`` after every round."""
    start, device = time.perf_counter(), torch.device(args.device)
    unknown = [k for k in args.profile if k.split("/")[0] not in args.encodings or k.split("/")[-1] not in args.amps]
    if unknown:
        print(f"--profile: expected cases encoding/amp of --encodings and --amps, got {unknown}", file=sys.stderr)
        raise SystemExit(2)
    overrides = (small if args.small else []) + list(args.set)
    host = recipe_batch(args.size, args.clouds, point_max=args.point_max)
    counts = torch.diff(host.ptr).tolist()
    batch = to_device(host, device)
    nets = {pe: Network(pe, overrides, device) for pe in args.encodings}
    cfgs = {(pe, amp): nets[pe].cfg(amp) for pe in args.encodings for amp in args.amps}
    cases = {f"{pe}/{amp}": {"encoding": pe, "amp": amp, "config": case_label(pe),
                             "autocast": str(build.mixed_precision(cfgs[pe, amp], device) or torch.float32)[6:],
                             "parameters": nets[pe].parameters, "warmup_s": [], "steps_s": []}
             for pe in args.encodings for amp in args.amps}
    out = {"benchmark": "bench_ptv3_step --recipe", "provenance": provenance(torch.get_num_threads()),
           "device": str(device),
           "size": args.size, "clouds": args.clouds, "points_per_cloud": counts, "points": sum(counts),
           "small": args.small, "set": list(args.set), "rounds": 0, "warmup": args.warmup,
           "time": "wall seconds of one train_step (the device waited for before and after), median of the "
                   "timed rounds, cases interleaved",
           "memory": "CUDA: max_memory_allocated with its peak reset before each step; peak_step_mib above "
                     "the level before the step; state_mib: parameters, gradients, AdamW moments",
           "cases": cases}
    if device.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(device)
    last_round = 0.0
    for r in range(args.warmup + args.rounds):
        began = time.perf_counter()
        if r > args.warmup and began - start + last_round > args.budget:     # the first timed round always runs
            out["stopped"] = f"--budget {args.budget:.0f} s: no time for round {r + 1} after {began - start:.0f} s"
            break
        one_round(cases, nets, cfgs, batch, warmup=r < args.warmup)
        last_round = time.perf_counter() - began
        out["rounds"] = max(0, r + 1 - args.warmup)
        out["seconds"] = time.perf_counter() - start
        summarise(cases, args.encodings, args.amps)
        save_json(args.out, out, indent=1)
        last = {k: (v["steps_s"] or v["warmup_s"] or [float("nan")])[-1] for k, v in cases.items()}
        print(f"round {r + 1}: " + ", ".join(f"{k} {s:.3f} s" for k, s in last.items()), flush=True)
    if args.saved_tensors:
        for key, row in cases.items():
            pe, amp = key.split("/")
            row["saved_bytes_per_point"] = saved_bytes(nets[pe], amp, batch) / sum(counts)
        save_json(args.out, out, indent=1)
    for key in args.profile:                                  # after the timed rounds: they stay unprofiled
        if "error" in cases[key] or time.perf_counter() - start > args.budget:
            continue
        pe, amp = key.split("/")
        out.setdefault("profile", {})[key] = profiled(nets[pe], cfgs[pe, amp], batch)
        save_json(args.out, out, indent=1)
    save_json(args.out, out, indent=1)
    return out


def recipe_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("the recipe's step (--recipe)")
    g.add_argument("--recipe", action="store_true", help="the recipe's networks and batch (see the docstring)")
    g.add_argument("--device", default="cpu")
    g.add_argument("--amps", nargs="+", choices=("none", "bf16", "fp16"), default=["none", "bf16"])
    g.add_argument("--encodings", nargs="+", default=["none", "none18", "geope", "point3drope"],
                   help="none: the published network; none18: none at the encodings' widths (head width 18)")
    g.add_argument("--clouds", type=int, default=3, help="crops in the batch (the recipe's 12 over 4 GPUs: 3)")
    g.add_argument("--size", choices=("tiny", "demo", "bench"), default="bench", help="synth --size of the room")
    g.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    g.add_argument("--budget", type=float, default=600.0, help="seconds after which no round starts")
    g.add_argument("--small", action="store_true", help="the modest network of the CPU mode (tests)")
    g.add_argument("--point-max", type=int, default=204_800, help="points a crop at most (the recipe's 204,800)")
    g.add_argument("--saved-tensors", action="store_true",
                   help="also count the bytes a point the forward keeps for the backward (--rounds 0: only that)")
    g.add_argument("--profile", nargs="*", default=[], metavar="ENCODING/AMP",
                   help="cases to profile one more step of after the rounds (e.g. geope/none geope/bf16)")
    g.add_argument("--set", nargs="*", default=[], metavar="section.key=value", help="config overrides (last option)")
