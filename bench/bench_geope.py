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

Each (method, size) runs in a fresh subprocess: peak memory is the growth of the process's peak resident
set (ru_maxrss) during the first forward + backward, after the inputs exist; time is the median of
several forward + backward passes. Ratios are against rpe measured in the same run.

Usage: python bench/bench_geope.py [--reps 5] [--device cpu|cuda] [--sizes small]
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import platform
import resource
import statistics
from pathlib import Path

from bench_io import save_json

SIZES = [(80_000, 8, 32), (20_000, 16, 64), (5_000, 16, 128), (1_250, 16, 256), (312, 16, 512)]
METHODS = ("rpe", "geope", "geope-1x", "lingeope", "attn-geope", "attn-lingeope")
RESULTS = Path(__file__).resolve().parent / "results" / "bench_geope.json"


def _case(method: str, n: int, k: int, c: int, reps: int, device: str, queue) -> None:
    import torch
    from torch import nn

    from pointgeope.geope import GeoPE, frequencies
    from pointgeope.model.linear_rotation import rotate_relative
    from pointgeope.model.rotation import block_rotations, rotate_blocks

    torch.manual_seed(0)
    torch.set_num_threads(max(1, torch.get_num_threads()))
    dev = torch.device(device)
    pos = torch.rand(n, 3, device=dev) * 4.0
    idx = torch.randint(0, n, (n, k), device=dev)
    x = torch.randn(n, c, device=dev, requires_grad=True)
    pe = GeoPE(c, axes=3, pos_scale=25.0).to(dev)
    mlp = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3), nn.ReLU(inplace=True), nn.Linear(3, c)).to(dev)

    block_scale = frequencies(c).float().to(dev) * 25.0 / 3

    def step():
        pos_i, pos_j = pos.unsqueeze(1), pos[idx]
        if method == "attn-geope":
            mats = block_rotations(pos, block_scale)
            out = rotate_blocks(rotate_blocks(x, mats, pos, block_scale)[idx], mats, pos, block_scale, inverse=True)
        elif method == "attn-lingeope":
            out = rotate_relative(x[idx], pos_j - pos_i, block_scale)
        elif method == "rpe":
            rel = (pos_j - pos_i).view(-1, 3)
            out = mlp(rel).view(n, k, c)
        elif method == "geope-1x":
            out = pe(pe(x, pos)[idx], pos_i, inverse=True)
        else:
            out = pe.relative(x[idx], pos_i, pos_j, linear=(method == "lingeope"))
        out.sum().backward()

    def sync():
        if dev.type == "cuda":
            torch.cuda.synchronize()

    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        step(); sync()
        peak = torch.cuda.max_memory_allocated() - base
    else:
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        step()
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base
    def fresh_step():
        x.grad = None
        mlp.zero_grad(set_to_none=True)
        step()

    from pointgeope.model.kernel_check import timed     # the package's one timer

    times = timed(fresh_step, dev, reps, warmup=0)[1]
    queue.put({"time_s": statistics.median(times), "peak_bytes": int(peak)})


def run_case(method, size, reps, device):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_case, args=(method, *size, reps, device, queue))
    proc.start()
    result = queue.get()
    proc.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sizes", choices=("all", "small"), default="all",
                        help="small: skip the 80k stage (quick check)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    sizes = SIZES if args.sizes == "all" else SIZES[1:]

    rows = []
    print(f"{'(N, k, C)':>18} {'method':>13} {'time ms':>9} {'x rpe':>6} {'peak MB':>8} {'x rpe':>6}")
    for size in sizes:
        base = None
        for method in METHODS:
            r = run_case(method, size, args.reps, args.device)
            base = base or r
            row = {"N": size[0], "k": size[1], "C": size[2], "method": method, **r,
                   "time_ratio": r["time_s"] / base["time_s"],
                   "memory_ratio": r["peak_bytes"] / max(base["peak_bytes"], 1)}
            rows.append(row)
            print(f"{str(size):>18} {method:>13} {1e3 * r['time_s']:9.1f} {row['time_ratio']:6.2f} "
                  f"{r['peak_bytes'] / 2**20:8.1f} {row['memory_ratio']:6.2f}")
    save_json(args.out, {"benchmark": "geope_relative_vs_rpe_mlp", "device": args.device, "reps": args.reps,
                         "machine": platform.platform(), "processor": platform.processor(), "rows": rows})
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
