"""Benchmark: a full PTv3 training step (forward, loss, backward, optimiser step) per positional encoding.

Two modes:

**The encodings on the CPU** (default). The network is ``PTv3Seg`` (``model.backbone: ptv3``) at a modest size:
four stages at head width 18 (the width every rotary encoding uses fully, the comparison's), enc_channels (18,
36, 72, 144), one or two blocks a stage, patches of 256; the batch is two clouds of ``--points`` points each, one
point per 4 cm voxel of a 6 x 6 x 3 m box. The encodings (``none``, ``geope``, ``rope3d``, ``point3drope``,
``pointrope``; ``lingeope`` with ``--lingeope``) are interleaved round by round at each thread count (a busy
machine slows all alike); the median step of the rounds is kept, with its ratio to ``none`` measured in the same
rounds, and the fastest round's (a stall of two OpenMP threads on a busy machine only adds time).

**The recipe** (``--recipe``; ``bench/gpu_check.py``'s ``ptv3`` step on a GPU). The networks of
``configs/s3dis/ptv3_<encoding>.yaml`` (``none``: Pointcept's published widths, head width 16; the others head
width 18; ``none18``: ``none`` at width 18, the fair baseline of an encoding's cost), trained as the recipe
trains them (``engine.step.train_step``: ``train.amp``'s autocast, the recipe's cross entropy + Lovasz, AdamW
with the ``block`` group, one cycle), on ``--clouds`` crops of the room that ``pointgeope synth --size SIZE``
writes, each through the recipe's training pipeline (``ptv3_train_transform``: its augmentations, grid 0.02 m,
the 60 % sphere crop, at most 204,800 points). The recipe's batch is 12 such crops in all, divided over the
GPUs (Pointcept's README trains on 4: 3 a GPU); the default ``--clouds 3`` is that per-GPU batch (12 on one
GPU need about 4 x its memory: about 205 GB in float32, ``--saved-tensors`` below).
Mix3D, which joins pairs of crops into one cloud, is not applied (the same points, in half as many clouds).
Each encoding is one network and optimiser; each (encoding, ``--amps`` precision) case is one step of a round,
the cases interleaved, ``--warmup`` untimed rounds first. Per case: the median step (wall seconds, the device
waited for), peak memory (``torch.cuda.max_memory_allocated``, reset before each step: ``peak_step_mib`` above
the level before the step, i.e. activations and transients; ``state_mib`` the network's parameters, gradients
and AdamW's moments), ratios to ``none`` and to float32 from the same rounds. No round starts past
``--budget`` seconds; the JSON is rewritten after every round; a case out of memory is recorded and dropped.
On the CPU ``bf16`` runs in float32, as ``train.amp`` does there (the row's ``autocast`` says which ran).
``--profile geope/none ...``: after the rounds, one more step of those cases under torch's profiler (top
kernels, on CUDA the GPU's busy share and the host's waits for the device, ``host_syncs``).
``--saved-tensors``: also each case's ``saved_bytes_per_point``, the bytes its forward keeps for the backward
(autograd's saved tensors, under the case's autocast also on the CPU): a step's activation memory on any
device (``--rounds 0 --warmup 0``: only that; ``--point-max`` caps the crops).
``--small`` swaps in the modest network above (the test suite's tiny run).

Usage: python bench/bench_ptv3_step.py [--rounds 5] [--threads 1 2] [--points 6000] [--lingeope]
       [--out bench/results/bench_ptv3_step_cpu_1thread.json]
       python bench/bench_ptv3_step.py --recipe --out X.json [--device cuda] [--amps none bf16]
       [--encodings none none18 geope point3drope] [--clouds 3] [--size bench] [--rounds 3] [--warmup 1]
       [--budget 150] [--small] [--profile geope/none ...] [--saved-tensors] [--point-max 204800]
       [--set section.key=value ...]
Issue 35's targets: geope <= 1.10x none; every rotary encoding within 1.10x of each other.
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from bench_io import provenance, save_json
from bench_ptv3_recipe import recipe_args, run_recipe
from pointgeope.engine import build
from pointgeope.engine.config import load_config
from pointgeope.plural import counted

ENCODINGS = ("none", "geope", "rope3d", "point3drope", "pointrope")
RESULTS = Path(__file__).resolve().parent / "results" / "bench_ptv3_step_cpu_1thread.json"
NETWORK = ["model.backbone=ptv3", "data.augment=pointcept_ptv3", "eval.protocol=ptv3", "data.grid_size=0.04",
           "model.ptv3.stride=[2, 2, 2]", "model.ptv3.enc_depths=[1, 1, 2, 1]",
           "model.ptv3.enc_channels=[18, 36, 72, 144]", "model.ptv3.enc_num_head=[1, 2, 4, 8]",
           "model.ptv3.enc_patch_size=[256, 256, 256, 256]", "model.ptv3.dec_depths=[1, 1, 1]",
           "model.ptv3.dec_channels=[36, 36, 72]", "model.ptv3.dec_num_head=[2, 2, 4]",
           "model.ptv3.dec_patch_size=[256, 256, 256]", "optim.name=adamw", "optim.lr=0.001"]


def batch(points: int, seed: int = 0) -> dict:
    """Two clouds of ``points`` distinct 4 cm voxels each: pos (2P, 3) m, x (2P, 6), grid_coord, offset, y."""
    g = torch.Generator().manual_seed(seed)
    pos, grid = [], []
    for _ in range(2):
        cells = torch.unique(torch.floor(torch.rand(points * 2, 3, generator=g) * torch.tensor([150, 150, 75])).long(),
                             dim=0)
        cells = cells[torch.randperm(len(cells), generator=g)[:points]]
        grid.append(cells)
        pos.append((cells.float() + torch.rand(len(cells), 3, generator=g)) * 0.04)
    pos, grid = torch.cat(pos), torch.cat(grid)
    return dict(pos=pos, x=torch.cat([torch.rand(len(pos), 3, generator=g), pos], 1), grid_coord=grid,
                offset=torch.tensor([points, 2 * points]), y=torch.randint(0, 13, (len(pos),), generator=g))


def make(pe: str) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    cfg = load_config(None, NETWORK + [f"model.pe={pe}"])
    torch.manual_seed(0)
    net = build.model(cfg).train()
    return net, build.optimizer(cfg, net)


def step(net, opt, b: dict) -> float:
    """Seconds of one training step."""
    t0 = time.perf_counter()
    logits = net(b["pos"], b["x"], b["offset"], grid_coord=b["grid_coord"])
    loss = torch.nn.functional.cross_entropy(logits, b["y"])
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return time.perf_counter() - t0


def measure(encodings: tuple[str, ...], threads: int, rounds: int, points: int) -> dict:
    torch.set_num_threads(threads)
    b = batch(points)
    nets = {pe: make(pe) for pe in encodings}
    for pe in encodings:                                       # warm-up: allocator, first-call paths
        step(*nets[pe], b)
    times = {pe: [] for pe in encodings}
    for _ in range(rounds):
        for pe in encodings:
            times[pe].append(step(*nets[pe], b))
    median = {pe: statistics.median(t) for pe, t in times.items()}
    best = {pe: min(t) for pe, t in times.items()}     # a stall on a busy machine only adds time
    rotary = [median[pe] for pe in encodings if pe not in ("none", "lingeope")]
    rotary_best = [best[pe] for pe in encodings if pe not in ("none", "lingeope")]
    return {"threads": threads, "median_s": median, "min_s": best,
            "ratio_to_none": {pe: median[pe] / median["none"] for pe in encodings},
            "ratio_to_none_min": {pe: best[pe] / best["none"] for pe in encodings},
            "rotary_spread": max(rotary) / min(rotary) if rotary else None,
            "rotary_spread_min": max(rotary_best) / min(rotary_best) if rotary_best else None, "rounds_s": times}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--points", type=int, default=6000)
    parser.add_argument("--lingeope", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    recipe_args(parser)
    args = parser.parse_args()
    if args.recipe:
        run_recipe(args, small=[o for o in NETWORK if o.startswith("model.ptv3.")])
        return
    encodings = ENCODINGS + (("lingeope",) if args.lingeope else ())
    run = provenance(args.threads)  # at the start: the code this run imports
    results = []
    for threads in args.threads:
        r = measure(encodings, threads, args.rounds, args.points)
        results.append(r)
        print(f"{counted(threads, 'thread')}, median (min) of {counted(args.rounds, 'round')}: " + ", ".join(
            f"{pe} {r['median_s'][pe] * 1e3:.0f} ms {r['ratio_to_none'][pe]:.3f}x ({r['ratio_to_none_min'][pe]:.3f}x)"
            for pe in encodings) + f"; rotary spread {r['rotary_spread']:.3f}x ({r['rotary_spread_min']:.3f}x)",
            flush=True)
    save_json(args.out, {"benchmark": "bench_ptv3_step", "provenance": run, "points_per_cloud": args.points,
                         "clouds": 2, "network": NETWORK, "rounds": args.rounds, "results": results})


if __name__ == "__main__":
    main()
