"""Benchmark: the fused attention's backward, summed with atomics or by source point (``gather_backward.SCATTER``),
and the tiles of the sorted kernels, at the S3DIS recipe's stages.

The neighbours are the real hierarchy's (``HierarchySpec`` of ``--clouds`` synthetic rooms of ``--points``
points on ``--device``: kNN lists of a point cloud, not random rows, so that the atomics' collisions and the
gathers' locality are the network's); stage ``s`` has the recipe's width (32 .. 512) and k (8, 16). For each
stage and ``--dtypes`` (float32; bfloat16 as under autocast: features and gradient in bf16, GeoPE's tables in
float32) it times, the fastest of ``--reps`` after ``--warmup`` untimed calls (default one, which compiles; the
interpreter compiles nothing: the test suite's smoke run takes 0), the ways of one op interleaved
(``bench/interleave.py``: every round runs each once, in a rotated order; sorted over atomic is the median
of the per-round ratios, with their range):

    frame_atomic, frame_sorted        standard GeoPE's ``frame_relation`` backward (gradients of x and q)
    frame_turn_first                  the same sorted in two passes (``gather_backward.FRAME_TURN_FIRST``)
    relation_atomic, relation_sorted  the plain ``relation`` backward (of key and q)
    aggregate_atomic, aggregate_sorted  the aggregation's backward (of logits and values; 8 groups, no delta)
    transpose                         the kNN lists' transpose alone (a fresh ``idx``: what a stage pays once
                                      a step; every layer of the stage then finds it on ``idx``)

and checks that sorted's gradient equals atomic's within float32 rounding (``max_rel``: largest difference
over the largest gradient). Then ``sweep``: ``frame_sorted`` and ``aggregate_sorted`` at stages 0 and 1,
``--sweep-dtype``, per (pairs a chunk, tile budget, rows a tile, warps) of :data:`SWEEP`
(``gather_backward.SETTINGS``; ``default`` marks each kernel's). The JSON (``--out``) is rewritten after every
stage; ``--budget`` seconds stop it early.

Usage: python bench/bench_relation_backward.py --out bench/results/relation_backward.json [--device cuda]
       [--clouds 16] [--points 80000] [--stages 0 1 2 3 4] [--dtypes float32 bfloat16] [--reps 5]
Under TRITON_INTERPRET=1 POINTGEOPE_KERNELS=triton it runs on the CPU at tiny sizes (the test suite's smoke test).
"""
from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import interleave
from bench_io import save_json
from bench_model import synthetic_room
from gpu_record import run_record
from pointgeope.geope import frequencies
from pointgeope.model import fused_attention, gather_backward
from pointgeope.model.kernel_check import sync, timed
from pointgeope.model.ops import HierarchySpec
from pointgeope.model.rotation import rotation_tables

STRIDES, NEIGHBOURS, WIDTHS, SHARE = (1, 4, 4, 4, 4), (8, 16, 16, 16, 16), (32, 64, 128, 256, 512), 8
OPS = ("frame", "relation", "aggregate")
# (block_t, budget, rows, warps) of gather_backward.SETTINGS, each kernel's default among them (frame's first,
# aggregate's second); bench/triton_compile_check.py records their spills
SWEEP = ((0, 2048, 4, 8), (0, 2048, 8, 8), (0, 4096, 8, 8), (0, 1024, 4, 8), (0, 2048, 8, 4), (32, 4096, 8, 8))
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def stage_inputs(h, coords: list[torch.Tensor], s: int, dtype: torch.dtype) -> dict:
    """Stage ``s``'s lists, GeoPE's tables (float32) and random features, queries, incoming gradient and
    attention logits."""
    idx, coord = h.neighbours[s], coords[s]
    (n, k), c = idx.shape, WIDTHS[s]
    g = torch.Generator(coord.device).manual_seed(s)
    x, q = (torch.randn(n, c, generator=g, device=coord.device).to(dtype) for _ in range(2))
    tables = rotation_tables(coord.float(), (frequencies(c) * 25.0 / 3).float().to(coord.device), c)
    grad = torch.randn(n, k, c, generator=g, device=coord.device).to(dtype)
    logits = torch.randn(n, k, c // SHARE, generator=g, device=coord.device).to(dtype)
    return {"idx": idx, "tables": tables, "x": x, "q": q, "grad": grad, "logits": logits}


def _backward(op: str, t: dict, way: str):
    """A closure that runs ``op``'s backward (its graph kept) and returns its gradients: ``frame``, ``relation``
    (of features and queries), ``aggregate`` (of logits and values, ``share_planes`` 8, no ``delta``); it
    refuses to run unless ``gather_backward`` sums the ``way`` (``sorted`` or ``atomic``) its row is labelled."""
    x, q = t["x"].clone().requires_grad_(), t["q"].clone().requires_grad_()
    if op == "aggregate":
        logits = t["logits"].clone().requires_grad_()
        out, inputs, grad = fused_attention.aggregate(logits, x, t["idx"], None, SHARE), [logits, x], t["q"]
    else:
        out = (fused_attention.frame_relation(x, t["idx"], t["tables"], q) if op == "frame" else
               fused_attention.relation(x, t["idx"], q))
        inputs, grad = [x, q], t["grad"]

    def run():
        if gather_backward.sorted_backward() != (way == "sorted"):
            raise RuntimeError(f"{op}: timed as {way}, but gather_backward.SCATTER is {gather_backward.SCATTER!r}")
        return torch.autograd.grad(out, inputs, grad, retain_graph=True)
    return run


def _max_rel(got, want) -> float:
    """The largest difference of the gradients ``got`` and ``want`` over the largest of ``want``."""
    top = max(float(b.float().abs().max()) for b in want)
    return max(float((a.float() - b.float()).abs().max()) for a, b in zip(got, want, strict=True)) / max(top, 1e-30)


def _under(way: str, turn_first: bool, run):
    """``run`` called inside ``gather_backward.scatter(way, turn_first)``: each side of an interleaved round
    sets its own scatter, whatever the side before it set."""
    def call():
        with gather_backward.scatter(way, turn_first=turn_first):
            return run()
    return call


def time_stage(t: dict, device: torch.device, reps: int, warmup: int = 1) -> dict:
    """Seconds of each backward per scatter (module docstring), the transpose's, and sorted vs atomic. Per op
    the scatters (and, for ``frame``, the two-pass sorted sum) are interleaved (``interleave.rounds``:
    ``warmup`` untimed calls each, the first compiles, then ``reps`` rounds, each running every side once in a
    rotated order): each side's minimum, and ``{op}_sorted_over_atomic`` the median of the per-round ratios
    (``..._paired_range`` their range, ``..._of_mins`` the ratio of the minima)."""
    row = {}
    wait = functools.partial(sync, device)
    for op in OPS:
        fns = {way: _under(way, False, _backward(op, t, way)) for way in ("atomic", "sorted")}
        if op == "frame":                                # standard GeoPE's sorted sum in two passes
            fns["turn_first"] = _under("sorted", True, _backward(op, t, "sorted"))
        grads, wall, _ = interleave.rounds(fns, reps, warmup=warmup, sync=wait)
        summary = interleave.paired(wall, "atomic")
        for way in ("atomic", "sorted"):
            row[f"{op}_{way}"] = min(wall[way])
        if op == "frame":
            row["frame_turn_first"] = min(wall["turn_first"])
            row["frame_turn_first_max_rel"] = _max_rel(grads["turn_first"], grads["atomic"])
        row[f"{op}_max_rel"] = _max_rel(grads["sorted"], grads["atomic"])
        row[f"{op}_sorted_over_atomic"] = summary["sorted"]["paired_median"]
        row[f"{op}_sorted_over_atomic_paired_range"] = summary["sorted"]["paired_range"]
        row[f"{op}_sorted_over_atomic_of_mins"] = summary["sorted"]["ratio_of_mins"]
    rows = t["idx"].shape[0]
    row["transpose"] = min(timed(lambda: gather_backward.transpose(t["idx"].clone(), rows), device, reps, warmup)[1])
    return row


def sweep(t: dict, device: torch.device, reps: int, warmup: int = 1) -> dict:
    """``frame_sorted`` and ``aggregate_sorted`` per setting of :data:`SWEEP` (``block_t`` 0: k rounded up) of
    their kernels, with the tiles it gives."""
    out = {}
    k, c = t["idx"].shape[1], t["x"].shape[1]
    for op in ("frame", "aggregate"):
        kernel = f"{op}_gather"
        default = gather_backward.SETTINGS[kernel]
        for block_t, budget, rows, warps in SWEEP:
            setting = dict(block_t=block_t, budget=budget, rows=rows, warps=warps)
            with gather_backward.scatter("sorted"), gather_backward.setting(kernel, setting):
                seconds = min(timed(_backward(op, t, "sorted"), device, reps, warmup)[1])
            out.setdefault(op, {})[f"t{block_t}_b{budget}_r{rows}_w{warps}"] = {
                "seconds": seconds, "tiles": gather_backward.tiles(kernel, k, min(c, 64), setting=setting),
                "default": setting == default}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add = parser.add_argument
    add("--out", type=Path, required=True)
    add("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    add("--clouds", type=int, default=16)
    add("--points", type=int, default=80_000)
    add("--stages", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    add("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=sorted(DTYPES))
    add("--sweep-dtype", default="bfloat16", choices=sorted(DTYPES))
    add("--sweep-stages", type=int, nargs="*", default=[0, 1])
    add("--reps", type=int, default=5)
    add("--warmup", type=int, default=1, help="untimed calls before the timed ones (the first compiles)")
    add("--budget", type=float, default=1e9, help="seconds: no new stage or sweep after them")
    args = parser.parse_args()
    start, device = time.perf_counter(), torch.device(args.device)
    coord = torch.cat([synthetic_room(args.points, seed=c) for c in range(args.clouds)]).to(device)
    offset = (torch.arange(1, args.clouds + 1) * args.points).to(device)
    h = HierarchySpec(STRIDES, NEIGHBOURS)(coord, offset)
    coords = [coord]
    for s in range(1, len(STRIDES)):
        coords.append(coords[-1][h.samples[s]])
    result = {"device": args.device,
              "run": run_record(args.device), "clouds": args.clouds,
              "points": args.points, "warmup": args.warmup,
              "settings": {k: dict(v) for k, v in gather_backward.SETTINGS.items()},
              "stages": {}, "sweep": {}}
    for s in args.stages:
        for name in args.dtypes:
            if time.perf_counter() - start < args.budget:
                t = stage_inputs(h, coords, s, DTYPES[name])
                key = f"stage{s}_n{t['idx'].shape[0]}_k{t['idx'].shape[1]}_c{WIDTHS[s]}_{name}"
                result["stages"][key] = time_stage(t, device, args.reps, args.warmup)
                save_json(args.out, result)
                print(key, result["stages"][key], flush=True)
    for s in args.sweep_stages:
        if time.perf_counter() - start < args.budget:
            t = stage_inputs(h, coords, s, DTYPES[args.sweep_dtype])
            result["sweep"][f"stage{s}_{args.sweep_dtype}"] = sweep(t, device, args.reps, args.warmup)
            save_json(args.out, result)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
