"""Benchmark: the cost of PTv3's attention encodings (pointgeope/model/qk_encodings.py), forward + backward.

Two measurements, each at 1 and 2 threads, every configuration's encodings interleaved round by round (a
busy machine slows all of them alike) and the median of the rounds kept:

    encoding   enc(q, k, coord, grid) and its backward on q, k (B, H, L, D) of a realistic PTv3 stage:
               2 x 80k points in patches of 1024 (B = 157), H heads, head width D. The encoding's own cost;
               ``none`` is the identity (about zero) and ``lingeope`` has no per-token form (not here).
    attention  enc.attention(q, k, v, coord, grid) + backward on ``--attn-patches`` patches: the encoding
               with torch's scaled_dot_product_attention (lingeope: its per-pair scores), as a ratio to
               ``none`` (plain SDPA) on the same patches. A training step adds the network around it.

Usage: python bench/bench_qk_encodings.py [--rounds 5] [--threads 1 2] [--heads 4 16] [--head-dims 16 18]
       [--points 160000] [--attn-patches 1] [--skip-attention] [--out bench/results/bench_qk_encodings.json]

The committed figures (docs/positional-encodings.md) are two runs: ``--heads 4`` (1 and 2 threads) into
``bench_qk_encodings.json`` and ``--heads 16 --threads 1 --out bench/results/bench_qk_encodings_h16.json``.
"""
from __future__ import annotations

import argparse
import math
import statistics
import time
from pathlib import Path

import torch

from bench_io import provenance, save_json
from pointgeope.model.qk_encodings import qk_encoding

ROTARY = ("geope", "rope3d", "point3drope", "pointrope")
ATTENTION = ("none", *ROTARY, "lingeope")
RESULTS = Path(__file__).resolve().parent / "results" / "bench_qk_encodings.json"


def make_inputs(patches: int, heads: int, length: int, head_dim: int, seed: int = 0) -> dict:
    """q, k, v (B, H, L, D) with gradients, upstream gradients, coordinates of a 6 x 6 x 3 m room in metres
    and their 2 cm grid cells (B, L, 3)."""
    g = torch.Generator().manual_seed(seed)
    shape = (patches, heads, length, head_dim)
    tensors = {name: torch.randn(shape, generator=g).requires_grad_(name in "qkv") for name in
               ("q", "k", "v", "gq", "gk", "gv")}
    coord = torch.rand(patches, length, 3, generator=g) * torch.tensor([6.0, 6.0, 3.0])
    return {**tensors, "coord": coord, "grid": torch.floor(coord / 0.02).long()}


def time_encoding(enc, x: dict) -> float:
    """Seconds of enc(q, k) and the backward of both outputs."""
    t0 = time.perf_counter()
    q, k = enc(x["q"], x["k"], x["coord"], x["grid"])
    torch.autograd.backward((q, k), (x["gq"], x["gk"]))
    elapsed = time.perf_counter() - t0
    x["q"].grad = x["k"].grad = None
    return elapsed


def time_attention(enc, x: dict) -> float:
    """Seconds of enc.attention(q, k, v) and its backward."""
    t0 = time.perf_counter()
    out = enc.attention(x["q"], x["k"], x["v"], x["coord"], x["grid"])
    out.backward(x["gv"])
    elapsed = time.perf_counter() - t0
    x["q"].grad = x["k"].grad = x["v"].grad = None
    return elapsed


def measure(mode: str, names: tuple[str, ...], x: dict, threads: list[int], rounds: int) -> list[dict]:
    """Rows of median times per (threads, name), all interleaved in every round."""
    timer = time_encoding if mode == "encoding" else time_attention
    head_dim = x["q"].shape[-1]
    encs = {name: qk_encoding(name, head_dim).train() for name in names}
    times = {(t, name): [] for t in threads for name in names}
    for r in range(rounds + 1):                                          # round 0 warms up
        for t in threads:
            torch.set_num_threads(t)
            for name in names:
                elapsed = timer(encs[name], x)
                if r:
                    times[t, name].append(elapsed)
    batch, heads, length, _ = x["q"].shape
    return [{"mode": mode, "threads": t, "name": name, "patches": batch, "heads": heads, "length": length,
             "head_dim": head_dim, "median_s": statistics.median(times[t, name]), "times_s": times[t, name]}
            for t in threads for name in names]


def add_ratios(rows: list[dict]) -> None:
    """Each row's time over its configuration's fastest rotary encoding, and (attention) over ``none``."""
    def key(r):
        return r["mode"], r["threads"], r["heads"], r["head_dim"], r["patches"]
    for row in rows:
        group = [r for r in rows if key(r) == key(row)]
        row["vs_fastest_rotary"] = row["median_s"] / min(r["median_s"] for r in group if r["name"] in ROTARY)
        if row["mode"] == "attention":
            row["vs_none"] = row["median_s"] / next(r["median_s"] for r in group if r["name"] == "none")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--heads", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--head-dims", type=int, nargs="+", default=[16, 18])
    parser.add_argument("--points", type=int, default=160_000, help="tokens of the stage (2 x 80k)")
    parser.add_argument("--patch", type=int, default=1024)
    parser.add_argument("--attn-patches", type=int, default=1, help="patches of the attention measurement")
    parser.add_argument("--skip-attention", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    run = provenance(args.threads)  # at the start: the code this run imports

    rows = []
    print(f"{'mode':>9} {'thr':>3} {'B':>4} {'H':>3} {'D':>3} {'name':>12} {'ms':>9} {'/rotary':>8} {'/none':>7}")
    for heads in args.heads:
        for head_dim in args.head_dims:
            configs = [("encoding", ROTARY, math.ceil(args.points / args.patch))]
            if not args.skip_attention:
                configs.append(("attention", ATTENTION, args.attn_patches))
            for mode, names, patches in configs:
                found = measure(mode, names, make_inputs(patches, heads, args.patch, head_dim), args.threads,
                                args.rounds)
                add_ratios(found)
                rows += found
                for r in found:
                    vs_none = r.get("vs_none", float("nan"))
                    print(f"{mode:>9} {r['threads']:>3} {patches:>4} {heads:>3} {head_dim:>3} {r['name']:>12} "
                          f"{1e3 * r['median_s']:9.1f} {r['vs_fastest_rotary']:8.2f} {vs_none:7.2f}")
    save_json(args.out, {"benchmark": "qk_encodings", "provenance": run, "rounds": args.rounds,
                         "points": args.points, "patch": args.patch, "rows": rows})
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
