"""Benchmark: batch norm with its ReLU alone, torch's ``BatchNorm1d`` + ``relu`` against the fused op
(``pointgeope/model/norm.py``), and the plain norm (no ReLU, the blocks' third), torch's ``BatchNorm1d``
against the same kernels without the activation; forward + backward in training mode, float32 and bf16 rows
(float32 parameters, as under autocast), at the row counts and widths of the published 16 x 80k batch:

    pairs s1      N k = 1.28M x 16 pair rows of stage 1, width 32 (the weight MLP's first norm)
    pairs s1 C/s  the same rows at width 4 (its second norm, C / share_planes)
    pairs s1 rpe  the same rows at width 3 (the position MLP's norm)
    pairs s2      320k x 16 rows of stage 2, width 64
    points s1     1.28M point rows, width 32 (the blocks' norms)
    plain s1      the same point rows, no ReLU (the blocks' third norm, ``norm.BatchNorm``)
    plain s2      320k point rows of stage 2, width 64, no ReLU
    padded plain s1, padded plain s2   plain s1's and s2's rows in a padded batch (``padding.batch_rows``, what
                  a CUDA graph's step runs): the statistics over the first ``valid`` rows (the last 1/32 dummy;
                  ``padding.padded_sizes`` adds at most about 1/16), on the plain kernel (the CUDA default there)
                  against the torch ops' prefix statistics (``prefix_norm.prefix_batch_norm``, torch's path there);
                  on CUDA each also captured in a CUDA graph (``graph_*``: no launch costs, as the graphed step)
    residual s1, residual s2   plain s1's and s2's rows: the block's tail (``residual_norm.BatchNormAddReLU``:
                  the third norm, the residual add and the ReLU) in training, torch's ``BatchNorm1d``, add and ReLU
                  against the opt-in kernels (the norm's two launches with the add and ReLU in the second; backward
                  the norm's two, each applying the ReLU's mask from the saved output)
    residual eval s1, residual eval s2   the same rows, the eval forward alone (``torch.inference_mode``, as the
                  test runs it): torch's three ops (five launches) against the eval kernel's one (the CUDA default)

Each case: the time of one forward + backward (the package's timer, ``kernel_check.timed``: the device's
queue waited for before and after), the minimum over ``--reps`` runs, both paths interleaved; the fused
path's ratio to torch's, and the largest difference of the outputs and of the input's gradient relative to
their largest value, the gradient's where both paths' ReLU masks agree, with the count of values where they do
not (:func:`agreement`; the plain norm has no mask: every value compared, no flips). ``--scale`` divides the
rows (``--device cpu`` runs the fused path in Triton's interpreter: a check that the script runs, not a
timing).

Usage: python bench/bench_norm.py --out bench/results/bench_norm.json [--device cuda] [--reps 5] [--scale 1]
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch

from bench_io import save_json
from gpu_record import run_record

CASES = (("pairs s1", 1_280_000 * 16, 32, True), ("pairs s1 C/s", 1_280_000 * 16, 4, True),
         ("pairs s1 rpe", 1_280_000 * 16, 3, True), ("pairs s2", 320_000 * 16, 64, True),
         ("points s1", 1_280_000, 32, True), ("plain s1", 1_280_000, 32, False), ("plain s2", 320_000, 64, False))
PADDED = (("padded plain s1", 1_280_000, 32), ("padded plain s2", 320_000, 64))
RESIDUAL = (("residual s1", 1_280_000, 32, True), ("residual s2", 320_000, 64, True),
            ("residual eval s1", 1_280_000, 32, False), ("residual eval s2", 320_000, 64, False))


def one_case(rows: int, width: int, dtype: torch.dtype, device: torch.device, reps: int, relu: bool = True) -> dict:
    """One case (module docstring): ``BatchNormReLU`` with ``relu``, else the plain ``BatchNorm``."""
    from pointgeope.model.kernel_choice import forced
    from pointgeope.model.norm import BatchNorm, BatchNormReLU

    module = (BatchNormReLU if relu else BatchNorm)(width).to(device)
    x = (torch.randn(rows, width, device=device) * 2 + 0.5).to(dtype).requires_grad_()
    grad = torch.randn(rows, width, device=device).to(dtype)

    def step(path: str):
        def run():
            x.grad = None
            with forced(path):               # the backward too: the kernel switch is asked again there
                y = module(x)
                y.backward(grad)
            return y.detach(), x.grad
        return run
    out, best = interleaved(step, device, reps)
    return {"rows": rows, "width": width, "dtype": str(dtype)[6:], "relu": relu, "torch_ms": best["torch"] * 1e3,
            "fused_ms": best["triton"] * 1e3, "fused_over_torch": best["triton"] / best["torch"],
            **agreement(out["triton"], out["torch"], relu)}


def interleaved(step, device: torch.device, reps: int) -> tuple[dict, dict]:
    """``step(path)``'s run timed ``reps`` times for ``torch`` and ``triton`` in turn (the package's timer, one
    run each): each path's last outputs and its fastest run in seconds."""
    from pointgeope.model.kernel_check import timed

    out, seconds = {}, {"torch": [], "triton": []}
    for _ in range(reps):
        for path in ("torch", "triton"):
            out[path], times = timed(step(path), device, 1)
            seconds[path] += times
    return out, {path: min(s) for path, s in seconds.items()}


def residual_case(rows: int, width: int, dtype: torch.dtype, device: torch.device, reps: int, train: bool) -> dict:
    """One residual case (module docstring): ``residual_norm.BatchNormAddReLU`` with an identity of ``x``'s shape,
    torch's norm, add and ReLU (``forced("torch")``) against the kernels (``forced("triton")``): ``train``, forward
    + backward (the opt-in kernel); else the eval forward alone under ``torch.inference_mode`` (the CUDA default)."""
    from pointgeope.model.kernel_choice import forced
    from pointgeope.model.residual_norm import BatchNormAddReLU

    module = BatchNormAddReLU(width).to(device).train(train)
    x = (torch.randn(rows, width, device=device) * 2 + 0.5).to(dtype).requires_grad_(train)
    identity = torch.randn(rows, width, device=device).to(dtype).requires_grad_(train)
    grad = torch.randn(rows, width, device=device).to(dtype)

    def step(path: str):
        def run():
            if not train:
                with forced(path), torch.inference_mode():
                    y = module(x, identity)
                return y, y                 # no gradient: the output twice (agreement's dx is y's)
            x.grad = identity.grad = None
            with forced(path):
                y = module(x, identity)
                y.backward(grad)
            return y.detach(), x.grad
        return run
    out, best = interleaved(step, device, reps)
    return {"rows": rows, "width": width, "dtype": str(dtype)[6:], "relu": True, "train": train,
            "torch_ms": best["torch"] * 1e3, "fused_ms": best["triton"] * 1e3,
            "fused_over_torch": best["triton"] / best["torch"], **agreement(out["triton"], out["torch"])}


def padded_case(rows: int, width: int, dtype: torch.dtype, device: torch.device, reps: int) -> dict:
    """One padded case (module docstring): ``norm.BatchNorm`` in training inside ``padding.batch_rows`` over
    ``rows`` rows of which the first ``valid`` are real, on the kernel (``triton``) and on the torch ops' prefix
    statistics (``torch``), eager and (CUDA) each as a CUDA graph, all four interleaved."""
    from pointgeope.model import padding
    from pointgeope.model.kernel_check import timed
    from pointgeope.model.kernel_choice import forced
    from pointgeope.model.norm import BatchNorm

    module = BatchNorm(width).to(device)
    valid = torch.tensor(rows - rows // 32, device=device)
    x = (torch.randn(rows, width, device=device) * 2 + 0.5).to(dtype).requires_grad_()
    grad = torch.randn(rows, width, device=device).to(dtype)

    def step(path: str):
        def run():
            x.grad = None
            with forced(path):
                with padding.batch_rows({rows: valid}):
                    y = module(x)
                y.backward(grad)
            return y.detach(), x.grad
        return run
    sides = {f"eager {path}": step(path) for path in ("torch", "triton")}
    if device.type == "cuda":
        sides.update({f"graph {path}": graphed(step(path), module, device) for path in ("torch", "triton")})
    out, seconds = {}, {side: [] for side in sides}
    for _ in range(reps):
        for side, fn in sides.items():
            out[side], times = timed(fn, device, 1)
            seconds[side] += times
    ms = {side: min(s) * 1e3 for side, s in seconds.items()}
    row = {"rows": rows, "valid": int(valid), "width": width, "dtype": str(dtype)[6:], "relu": False,
           "torch_ms": ms["eager torch"], "fused_ms": ms["eager triton"],
           "fused_over_torch": ms["eager triton"] / ms["eager torch"],
           **agreement(out["eager triton"], out["eager torch"], relu=False)}
    if device.type == "cuda":
        row.update(graph_torch_ms=ms["graph torch"], graph_fused_ms=ms["graph triton"],
                   graph_fused_over_torch=ms["graph triton"] / ms["graph torch"],
                   **{f"graph_{k}": v for k, v in agreement(out["graph triton"], out["graph torch"], False).items()})
    return row


def graphed(run, module: torch.nn.Module, device: torch.device):
    """``run`` (forward + backward of one side of ``module``) recorded as ``engine/graphs.py`` records the step,
    by its recorder (``CudaRecorder``: warm-up passes on a side stream, then the capture); returns the replay,
    which answers ``run``'s (static) outputs."""
    from pointgeope.engine.graphs import CudaRecorder

    replay, out = CudaRecorder(device).record(run, module, before=lambda: None)

    def answered():
        replay()
        return out
    return answered


def agreement(fused: tuple, reference: tuple, relu: bool = True) -> dict:
    """The largest difference of the outputs ``y`` and of the input's gradients ``dx``, each relative to the
    reference's largest value. ``dx`` is compared where both paths' ReLU passed or both blocked: at the kink,
    ``BN(x) = 0`` to within rounding, the mask flips and that row's ``dx`` is ``g / sigma`` on one path and 0
    on the other (in float32, a few of the 600M values); those flips are counted, not mixed into the difference.
    Without ``relu`` (the plain norm) every value is compared."""
    (y, dx), (y_ref, dx_ref) = [[t.float() for t in pair] for pair in (fused, reference)]
    same = (y > 0) == (y_ref > 0) if relu else torch.ones_like(y, dtype=torch.bool)
    return {"max_rel_diff_y": float((y - y_ref).abs().max() / y_ref.abs().max()),
            "max_rel_diff_dx": float(((dx - dx_ref).abs() * same).max() / dx_ref.abs().max()),
            "relu_mask_flips": int((~same).sum())}


def planned() -> list[tuple]:
    """Every case in the order run, ``(name, rows, width, case function, its setting)``: :data:`CASES`, then
    :data:`PADDED` (after them: a failure there keeps every case above), then :data:`RESIDUAL` (last: new, the
    step's limit may cut them)."""
    return ([(name, rows, width, one_case, {"relu": relu}) for name, rows, width, relu in CASES]
            + [(name, rows, width, padded_case, {}) for name, rows, width in PADDED]
            + [(name, rows, width, residual_case, {"train": train}) for name, rows, width, train in RESIDUAL])


def printed(row: dict) -> str:
    """A case's line: the two sides' times and their ratio (a padded case's sides named the prefix ops and the
    kernel), then its CUDA graphs' where it has them."""
    torch_side, fused_side = ("prefix ops", "kernel") if "valid" in row else ("torch", "fused")
    graph = (f"  graph: prefix ops {row['graph_torch_ms']:8.3f} ms  kernel {row['graph_fused_ms']:8.3f} ms  "
             f"x{row['graph_fused_over_torch']:.2f}" if "graph_fused_ms" in row else "")
    return (f"{row['case']:<16} {row['dtype']:<9} {torch_side} {row['torch_ms']:8.3f} ms  {fused_side} "
            f"{row['fused_ms']:8.3f} ms  x{row['fused_over_torch']:.2f}{graph}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--scale", type=int, default=1, help="divide every case's rows by this")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"
    out = {"device": str(device), "run": run_record(str(device)),
           "time": "one forward + backward, training mode, minimum over reps (ms)",
           "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None, "cases": []}
    for name, rows, width, case, setting in planned():
        for dtype in (torch.bfloat16, torch.float32):
            row = {"case": name, **case(rows // args.scale, width, dtype, device, args.reps, **setting)}
            out["cases"].append(row)
            print(printed(row), flush=True)
            save_json(args.out, out, indent=1)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
