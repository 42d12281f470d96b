"""``pointgeope info --check``: every Triton kernel run once on the device against its torch path.

Each case runs the kernel the way the network does (through :mod:`pointgeope.model.kernels`, so a kernel that
fails here falls back and the table says so) and its torch path on the same inputs, and reports the largest
difference and the kernel's time (median of 3 runs after one that compiles)::

    kernel                   path      max diff   ms
    fps 80000 -> 20000       triton    0          38.1      (differing samples)
    knn self k=16            triton    0          2.3       (largest |d2| difference; rows that differ)
    aggregate fwd+bwd        triton    2.4e-07    1.9       (outputs and gradients, float32)

Sizes are the S3DIS recipe's on CUDA (an 80,000-point crop, 20,000 points at stride 4, width 64, k = 16,
share_planes 8) and small under Triton's CPU interpreter (``POINTGEOPE_KERNELS=triton TRITON_INTERPRET=1``).
"""
from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from pointgeope.model import fused_attention, kernels
from pointgeope.model.ops import fps, knn
from pointgeope.model.rotation import rotation_tables

__all__ = ["CheckRow", "check_kernels", "format_table", "passed"]

# What counts as agreeing with the torch path: FPS and kNN are defined exactly (the torch kNN may pick other
# rows among ties and near-ties within its float rounding); the attention sums in float32 with atomics.
TOLERANCE = {"fps": 0.0, "knn": 1e-4, "attention": 1e-3}


@dataclass
class CheckRow:
    kernel: str
    path: str            # "triton", or "torch (fell back: error)"
    max_diff: float
    ms: float
    note: str = ""


def _timed(fn: Callable[[], object], device: torch.device, reps: int) -> tuple[object, float]:
    """``fn()``'s result and its median time in ms over ``reps`` runs after a first one (which compiles)."""
    out = fn()
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        out = fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        times.append((time.perf_counter() - start) * 1e3)
    return out, statistics.median(times)


def _path(name: str) -> str:
    failed = kernels.failures().get(name)
    return "triton" if failed is None else f"torch (fell back: {failed})"


def _point_rows(device: torch.device, n: int, reps: int) -> list[CheckRow]:
    """FPS at stride 4 and the kNN of the first transition (self k = 16, down k = 16, up k = 3)."""
    g = torch.Generator().manual_seed(0)
    coord = (torch.rand(n, 3, generator=g) * torch.tensor([10.0, 8.0, 3.0])).to(device)
    off = torch.tensor([n], device=device)
    (idx, new_off), ms = _timed(lambda: fps(coord, off, 4), device, reps)
    want, _ = fps(coord, off, 4, backend="torch")
    rows = [CheckRow(f"fps {n} -> {n // 4}", _path("fps"), float((idx != want).sum()), ms, "differing samples")]
    coarse = coord[want]
    for label, q, q_off, s, s_off, k in (("self k=16", coarse, new_off, coarse, new_off, 16),
                                         ("down k=16", coarse, new_off, coord, off, 16),
                                         ("up k=3", coord, off, coarse, new_off, 3)):
        (got_i, got_d), ms = _timed(lambda: knn(q, s, k, q_off, s_off), device, reps)
        ref_i, ref_d = knn(q, s, k, q_off, s_off, backend="torch")
        rows.append(CheckRow(f"knn {label}", _path("knn"), float((got_d - ref_d).abs().max()), ms,
                             f"{int((got_i != ref_i).any(1).sum())} rows with other indices (ties)"))
    return rows


def _grads(fn: Callable[..., Tensor], inputs: list[Tensor]) -> list[Tensor]:
    """The output of ``fn(*inputs)`` and the gradients of a fixed random projection of it."""
    leaves = [x.detach().requires_grad_(x.is_floating_point()) for x in inputs]
    out = fn(*leaves)
    weight = torch.randn(out.shape, generator=torch.Generator(out.device).manual_seed(1), device=out.device,
                         dtype=out.dtype)
    grads = torch.autograd.grad((out * weight).sum(), [x for x in leaves if x.requires_grad])
    return [out.detach(), *grads]


def _attention_rows(device: torch.device, n: int, reps: int, k: int = 16, c: int = 64, s: int = 8) -> list[CheckRow]:
    """The four fused ops forward and backward, float32, against their torch references."""
    g = torch.Generator().manual_seed(2)
    coord = torch.rand(n, 3, generator=g).to(device) * 4
    idx, _ = knn(coord, coord, k, torch.tensor([n]), torch.tensor([n]))
    x, q, v = (torch.randn(n, c, generator=g).to(device) for _ in range(3))
    delta, w = torch.randn(n, k, c, generator=g).to(device), torch.randn(n, k, c // s, generator=g).to(device)
    scale = torch.tensor([1.0, 2.0, 4.0] * 7, device=device)[: c // 3]
    tables, disp = rotation_tables(coord, scale, c), coord[idx] - coord.unsqueeze(1)
    fa = fused_attention
    cases = {"relation": (lambda a, b, d: fa.relation(a, idx, b, d), lambda a, b, d: fa._ref_relation(a, idx, b, d),
                          [x, q, delta]),
             "frame_relation": (lambda a, b, d: fa.frame_relation(a, idx, tables, b, d),
                                lambda a, b, d: fa._ref_frame(a, idx, tables, b, d), [x, q, delta]),
             "linear_relation": (lambda a, b, d: fa.linear_relation(a, idx, disp, scale, b, d),
                                 lambda a, b, d: fa._ref_linear(a, idx, disp, scale, b, d), [x, q, delta]),
             "aggregate": (lambda a, b, d: fa.aggregate(a, b, idx, d, s), lambda a, b, d: fa._ref_aggregate(a, b, idx, d, s),
                           [w, v, delta])}
    rows = []
    for name, (fused, ref, inputs) in cases.items():
        got, ms = _timed(lambda: _grads(fused, inputs), device, reps)
        want = _grads(ref, inputs)
        diff = max(float((a.float() - b.float()).abs().max()) for a, b in zip(got, want))
        rows.append(CheckRow(f"{name} fwd+bwd", _path(name), diff, ms, f"n={n} k={k} width={c}"))
    return rows


def check_kernels(device: torch.device, points: int | None = None, pairs: int | None = None,
                  reps: int = 3) -> list[CheckRow]:
    """One row per kernel (module docstring): FPS and kNN on a crop of ``points``, the attention on ``pairs``
    queries (default: the recipe's sizes on CUDA, small ones elsewhere), the Triton kernels asked for
    (``POINTGEOPE_KERNELS=triton`` for the duration)."""
    small = device.type != "cuda"
    points, pairs = points or (600 if small else 80_000), pairs or (200 if small else 20_000)
    with kernels.chosen("triton"):
        kernels.check_runnable(device)
        return _point_rows(device, points, reps) + _attention_rows(device, pairs, reps)


def passed(rows: list[CheckRow]) -> bool:
    """Every kernel ran in Triton and agrees with its torch path within :data:`TOLERANCE`."""
    def tolerance(kernel: str) -> float:
        return TOLERANCE.get(kernel.split()[0], TOLERANCE["attention"])
    return all(r.path == "triton" and r.max_diff <= tolerance(r.kernel) for r in rows)


def format_table(rows: list[CheckRow]) -> str:
    lines = [f"{'kernel':<24} {'path':<8} {'max diff':>10} {'ms':>9}  note"]
    for r in rows:
        lines.append(f"{r.kernel:<24} {r.path:<8} {r.max_diff:>10.3g} {r.ms:>9.2f}  {r.note}")
    return "\n".join(lines)
