"""Benchmark: GeoPE relative rotation vs Point Transformer's RPE MLP, forward + backward.

For each stage of PointTransformerSeg50 on an 80k-point input, (N, k, C) = (80k, 8, 32), (20k, 16, 64),
(5k, 16, 128), (1250, 16, 256), (312, 16, 512), it times and measures the peak memory of

    rpe        theta(p_j - p_i), theta = Linear(3,3)-BN-ReLU-Linear(3,C)   (the baseline)
    geope      GeoPE.relative(x_j, p_i, p_j)              R(t_i)^T R(t_j) x_j on gathered keys
    geope-1x   rotate the N keys once, gather, rotate back per query (how the attention layer uses it)
    lingeope   GeoPE.relative(x_j, p_i, p_j, linear=True) R(t_j - t_i) x_j
    attn-geope     the attention layer's kernels (pointgeope.model.rotation): per-point block matrices,
                   rotate once, gather, rotate back with the query's matrices
    attn-lingeope  the attention layer's per-pair Rodrigues kernel on displacements

Peak memory: each (method, size) in a fresh subprocess, the growth of the process's peak resident set
(ru_maxrss; on CUDA the allocator's peak) during the first forward + backward, after the inputs exist.
Time: one fresh subprocess per (size, thread count) (``--threads 1 2``: one thread and all cores) builds
every method on the same inputs and interleaves them (``bench/interleave.py``: ``--reps`` rounds, each
running the six once in a rotated order, after one warm-up call each); a method's time ratio is its time
over rpe's in the same round (paired), reported as the median and range of those ratios, with each side's
minimum. The JSON records the run's provenance (commit, dirty flag, versions, threads, load average).

Usage: python bench/bench_geope.py [--reps 5] [--device cpu|cuda] [--threads 1 2] [--sizes small] [--out FILE]
"""
from __future__ import annotations

import argparse
import functools
import multiprocessing as mp
import os
import resource
from pathlib import Path

import interleave
from bench_io import out_path, provenance, save_json

SIZES = [(80_000, 8, 32), (20_000, 16, 64), (5_000, 16, 128), (1_250, 16, 256), (312, 16, 512)]
METHODS = ("rpe", "geope", "geope-1x", "lingeope", "attn-geope", "attn-lingeope")
RESULTS = Path(__file__).resolve().parent / "results" / "bench_geope.json"


def _steps(n: int, k: int, c: int, device: str) -> dict:
    """``method -> step()`` for every method of :data:`METHODS` on the same random inputs (seed 0): one
    forward + backward of the method's rotated (or encoded) ``(n, k, c)`` keys, gradients reset first."""
    import torch
    from torch import nn

    from pointgeope.geope import GeoPE, frequencies
    from pointgeope.model.linear_rotation import rotate_relative
    from pointgeope.model.rotation import block_rotations, rotate_blocks

    torch.manual_seed(0)
    dev = torch.device(device)
    pos = torch.rand(n, 3, device=dev) * 4.0
    idx = torch.randint(0, n, (n, k), device=dev)
    x = torch.randn(n, c, device=dev, requires_grad=True)
    pe = GeoPE(c, axes=3, pos_scale=25.0, check_finite=False).to(dev)   # pos made finite here: no read a step,
    #   as the attn-* and rpe rows (a synchronisation per call would time the host, not the rotation)
    mlp = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3), nn.ReLU(inplace=True), nn.Linear(3, c)).to(dev)
    block_scale = frequencies(c).float().to(dev) * 25.0 / 3

    def forward(method):
        pos_i, pos_j = pos.unsqueeze(1), pos[idx]
        if method == "attn-geope":
            mats = block_rotations(pos, block_scale)
            return rotate_blocks(rotate_blocks(x, mats, pos, block_scale)[idx], mats, pos, block_scale, inverse=True)
        if method == "attn-lingeope":
            return rotate_relative(x[idx], pos_j - pos_i, block_scale)
        if method == "rpe":
            return mlp((pos_j - pos_i).view(-1, 3)).view(n, k, c)
        if method == "geope-1x":
            return pe(pe(x, pos)[idx], pos_i, inverse=True)
        return pe.relative(x[idx], pos_i, pos_j, linear=(method == "lingeope"))

    def step(method):
        x.grad = None
        mlp.zero_grad(set_to_none=True)
        forward(method).sum().backward()

    return {method: (lambda method=method: step(method)) for method in METHODS}


def _memory(method: str, n: int, k: int, c: int, device: str, queue) -> None:
    """In a fresh process: the peak memory of ``method``'s first forward + backward, after the inputs exist
    (CUDA: the allocator's peak over what was allocated; CPU: the growth of the peak resident set)."""
    import torch

    torch.set_num_threads(1)
    step = _steps(n, k, c, device)[method]
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        step()
        torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
    else:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        step()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    queue.put(int(peak))


def _timing(n: int, k: int, c: int, device: str, threads: int, reps: int, queue) -> None:
    """In a fresh process at ``threads`` torch threads: every method's step interleaved over ``reps`` rounds
    (one warm-up call each), the device's queue waited for around each; paired against rpe."""
    import torch

    from pointgeope.model.kernel_check import sync

    torch.set_num_threads(threads)
    _, wall, _ = interleave.rounds(_steps(n, k, c, device), reps, warmup=1,
                                   sync=functools.partial(sync, torch.device(device)))
    queue.put(interleave.paired(wall, "rpe"))


def in_process(target, *args):
    """``target(*args, queue)`` in a fresh spawned process; what it put on the queue."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, queue))
    proc.start()
    result = queue.get()
    proc.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="interleaved rounds")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--sizes", choices=("all", "small"), default="all",
                        help="small: skip the 80k stage (quick check; writes a temporary file unless --out)")
    parser.add_argument("--out", type=Path, help=f"results JSON (default bench/results/{RESULTS.name})")
    args = parser.parse_args()
    sizes = SIZES if args.sizes == "all" else SIZES[1:]
    out = out_path(args.out, RESULTS, smoke=args.sizes == "small")
    result = {"benchmark": "geope_relative_vs_rpe_mlp", "device": args.device, "reps": args.reps,
              "provenance": provenance(args.threads), "rows": [],
              "time": "seconds of one forward + backward, the six methods interleaved (rotated) over reps rounds "
                      "in one process per size and thread count; ratios to rpe per round (paired): median, range"}
    print(f"{'(N, k, C)':>18} {'method':>13} {'peak MB':>8} {'x rpe':>6}  time ms, x rpe paired median [range] "
          f"at {', '.join(map(str, args.threads))} {'thread' if args.threads == [1] else 'threads'}")
    for size in sizes:
        peaks = {method: in_process(_memory, method, *size, args.device) for method in METHODS}
        times = {t: in_process(_timing, *size, args.device, t, args.reps) for t in args.threads}
        for method in METHODS:
            row = {"N": size[0], "k": size[1], "C": size[2], "method": method, "peak_bytes": peaks[method],
                   "memory_ratio": peaks[method] / max(peaks["rpe"], 1),
                   "times": [{"threads": t, **times[t][method]} for t in args.threads]}
            result["rows"].append(row)
            cells = "  ".join(f"{1e3 * r['min_s']:7.1f} {r['paired_median']:.2f}x "
                              f"[{r['paired_range'][0]:.2f}-{r['paired_range'][1]:.2f}]" for r in row["times"])
            print(f"{str(size):>18} {method:>13} {peaks[method] / 2**20:8.1f} {row['memory_ratio']:6.2f}  {cells}",
                  flush=True)
        save_json(out, result)
    result["load_average_1min_end"] = os.getloadavg()[0]
    save_json(out, result)
    print(f"saved {out}")


if __name__ == "__main__":
    main()
