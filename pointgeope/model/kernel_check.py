"""``pointgeope info --check``: every Triton kernel run once on the device against its torch path.

Each case runs the kernel the way the network does (through :mod:`pointgeope.model.kernels`, so a kernel that
fails here falls back and the table says so) and its torch path on the same inputs, and reports the largest
difference and the kernel's time (median of 3 runs, after one that compiles on CUDA; the interpreter compiles
nothing)::

    kernel                        path      max diff   ms
    fps 80000 -> 20000            triton    0          38.1      (differing samples)
    knn self k=16                 triton    0          2.3       (largest |d2| difference; rows that differ)
    aggregate fwd+bwd             triton    2.4e-07    1.9       (outputs and gradients, float32)

The rows are the cases every registered kernel gives (:class:`pointgeope.model.kernels.Kernel`, ``check``),
kernels by name (GeoPE's shift tables: ``apply_shifted``'s turn of the points and of the pairs, forward and
backward, and ``rotation_tables``, ``shifted_kernel.py``); the relation's, standard GeoPE's and the aggregation's
have a second row, their backward summed the other way (``gather_backward.SCATTER``: with atomics by default, by
source point in the second row). Sizes
are the S3DIS recipe's on CUDA (an 80,000-point crop, 20,000 points at stride 4, width 64, k = 16, share_planes 8) and
the smallest under Triton's CPU interpreter (``POINTGEOPE_KERNELS=triton TRITON_INTERPRET=1``, whose time goes
with the programs) that still end every kernel's rows in a masked tile: 72 points (18 at stride 4, more than k;
tiles of 16 and 32 rows) and 17 queries (odd: the attention's tiles hold 1 to 4 queries; 272 pairs, tiles of 32).
"""
from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from pointgeope.model import gather_backward, kernels
from pointgeope.model.kernel_choice import forced
from pointgeope.model.kernels import CheckCase
from pointgeope.model.rotation import rotation_tables

__all__ = ["CheckRow", "check_kernels", "format_table", "passed", "timed", "fps_cases", "knn_cases", "attention_cases"]

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
    tolerance: float = 0.0


def timed(fn: Callable[[], object], device: torch.device, reps: int, warmup: int = 1) -> tuple[object, list[float]]:
    """``fn()``'s last result and its wall seconds in each of ``reps`` runs after ``warmup`` untimed ones
    (which compile), the device's queue waited for before and after each run: the package's timer
    (``info --check`` and the ``bench/`` scripts that time one thing); ``bench/interleave.rounds`` times
    the ``bench/`` comparisons, sides interleaved, with the same waits around each call."""
    out = None
    for _ in range(warmup):
        out = fn()
    times = []
    for _ in range(reps):
        sync(device)
        start = time.perf_counter()
        out = fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return out, times


def sync(device: torch.device) -> None:
    """Wait for ``device``'s queued work (a no-op on the CPU): the wait around each timed run, here and in
    ``bench/`` (``interleave.rounds(..., sync=partial(sync, device))``)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(fn: Callable[[], object], device: torch.device, reps: int) -> tuple[object, float]:
    """``fn()``'s result and its median time in ms over ``reps`` runs after a first one that compiles (on
    CUDA; none under the interpreter, which compiles nothing and whose runs each take as long)."""
    out, times = timed(fn, device, reps, warmup=1 if device.type == "cuda" else 0)
    return out, statistics.median(times) * 1e3


def _path(kernel: kernels.Kernel) -> str:
    """``torch`` with the error where the kernel fell back (its path from then on), else what ran in the case
    just timed (``kernel.ran``): ``triton``, ``torch`` or ``triton+torch`` (say a Triton forward whose backward
    sums with atomics under deterministic algorithms)."""
    failed = kernels.failures().get(kernel.name)
    if failed is not None:
        return f"torch (fell back: {failed})"
    return "+".join(p for p in ("triton", "torch") if p in kernel.ran) or "torch"


def _crop(device: torch.device, n: int) -> tuple[Tensor, Tensor]:
    g = torch.Generator().manual_seed(0)
    coord = (torch.rand(n, 3, generator=g) * torch.tensor([10.0, 8.0, 3.0])).to(device)
    return coord, torch.tensor([n], device=device)


def fps_cases(device: torch.device, n: int) -> list[CheckCase]:
    """FPS of an ``n``-point crop at stride 4 (the number of differing samples)."""
    from pointgeope.model.ops import fps

    coord, off = _crop(device, n)
    return [CheckCase(f"{n} -> {n // 4}", lambda: fps(coord, off, 4)[0], lambda: fps(coord, off, 4, backend="torch")[0],
                      lambda got, want: (float((got != want).sum()), "differing samples"), TOLERANCE["fps"])]


def knn_cases(device: torch.device, n: int) -> list[CheckCase]:
    """The kNN of the first transition of an ``n``-point crop: self k = 16, down k = 16, up k = 3."""
    from pointgeope.model.ops import fps, knn

    coord, off = _crop(device, n)
    want, new_off = fps(coord, off, 4, backend="torch")
    coarse = coord[want]

    def compare(got, ref):
        return (float((got[1] - ref[1]).abs().max()), f"{int((got[0] != ref[0]).any(1).sum())} rows with other "
                "indices (0 expected: both break ties to the smaller row)")
    return [CheckCase(label, lambda a=args: knn(*a), lambda a=args: knn(*a, backend="torch"), compare, TOLERANCE["knn"])
            for label, args in (("self k=16", (coarse, coarse, 16, new_off, new_off)),
                                ("down k=16", (coarse, coord, 16, new_off, off)),
                                ("up k=3", (coord, coarse, 3, off, new_off)))]


def _grads(fn: Callable[..., Tensor], inputs: list[Tensor]) -> list[Tensor]:
    """The output of ``fn(*inputs)`` and the gradients of a fixed random projection of it."""
    leaves = [x.detach().requires_grad_(x.is_floating_point()) for x in inputs]
    out = fn(*leaves)
    weight = torch.randn(out.shape, generator=torch.Generator(out.device).manual_seed(1), device=out.device,
                         dtype=out.dtype)
    grads = torch.autograd.grad((out * weight).sum(), [x for x in leaves if x.requires_grad])
    return [out.detach(), *grads]


def attention_cases(name: str, device: torch.device, n: int, k: int = 16, c: int = 64,
                    s: int = 8) -> list[CheckCase]:
    """The fused op ``name`` forward and backward, float32, against its torch reference, on ``n`` queries."""
    from pointgeope.model import fused_attention
    from pointgeope.model.ops import knn

    g = torch.Generator().manual_seed(2)
    coord = torch.rand(n, 3, generator=g).to(device) * 4
    x, q, v = (torch.randn(n, c, generator=g).to(device) for _ in range(3))
    delta, w = torch.randn(n, k, c, generator=g).to(device), torch.randn(n, k, c // s, generator=g).to(device)
    scale = torch.tensor([1.0, 2.0, 4.0] * 7, device=device)[: c // 3]
    # the inputs by torch's path (the kNN's and the tables' kernels have their own rows; on the CPU the default kNN
    # backend would be numba's, compiled on its first call)
    idx, _ = knn(coord, coord, k, torch.tensor([n]), torch.tensor([n]), backend="torch")
    with forced("torch"):
        tables = rotation_tables(coord, scale, c)
    disp = coord[idx] - coord.unsqueeze(1)
    kernel = fused_attention.KERNELS[name]
    args, inputs = {"relation": (lambda a, b, d: (a, idx, b, d), [x, q, delta]),
                    "frame_relation": (lambda a, b, d: (a, idx, tables, b, d), [x, q, delta]),
                    "frame_relation_fold": (lambda a, b, d: (a, idx, tables, b, d), [x, q, delta]),
                    "linear_relation": (lambda a, b, d: (a, idx, disp, scale, b, d), [x, q, delta]),
                    "aggregate": (lambda a, b, d: (a, b, idx, d, s), [w, v, delta])}[name]

    def compare(got, want):
        return (max(float((a.float() - b.float()).abs().max()) for a, b in zip(got, want, strict=True)),
                f"n={n} k={k} width={c}")

    def run(way: str | None = None):
        with gather_backward.scatter(way) if way else contextlib.nullcontext():
            return _grads(lambda *a: kernel(device, *args(*a)), inputs)
    reference = lambda: _grads(lambda *a: kernel.torch(*args(*a)), inputs)  # noqa: E731
    cases = [CheckCase("fwd+bwd", run, reference, compare, TOLERANCE["attention"])]
    if name not in ("linear_relation", "frame_relation_fold"):   # the other way to sum (gather_backward.SCATTER)
        other = "atomic" if gather_backward.sorted_backward() else "sorted"
        cases.append(CheckCase(f"fwd+bwd {other}", lambda: run(other), reference, compare, TOLERANCE["attention"]))
    return cases


def check_kernels(device: torch.device, points: int | None = None, pairs: int | None = None,
                  reps: int = 3) -> list[CheckRow]:
    """One row per case of every registered kernel (module docstring): FPS and kNN on a crop of ``points``,
    the attention on ``pairs`` queries (default: the recipe's sizes on CUDA, small ones elsewhere), the
    Triton kernels asked for (``POINTGEOPE_KERNELS=triton`` for the duration, in this context), each timed
    over ``reps`` runs after one that compiles (on CUDA: the interpreter compiles nothing)."""
    small = device.type != "cuda"
    points, pairs = points or (72 if small else 80_000), pairs or (17 if small else 20_000)
    rows = []
    with forced("triton"):
        kernels.check_runnable(device)
        for kernel in kernels.registered():
            for case in kernel.check(device, points, pairs) if kernel.check else ():
                kernel.ran.clear()
                got, ms = _timed(case.run, device, reps)
                path = _path(kernel)
                diff, note = case.compare(got, case.reference())
                rows.append(CheckRow(f"{kernel.name} {case.label}", path, diff, ms, note,
                                     case.tolerance))
    return rows


def passed(rows: list[CheckRow]) -> bool:
    """Every kernel ran in Triton and agrees with its torch path within its tolerance."""
    return all(r.path == "triton" and r.max_diff <= r.tolerance for r in rows)


def format_table(rows: list[CheckRow]) -> str:
    lines = [f"{'kernel':<29} {'path':<8} {'max diff':>10} {'ms':>9}  note"]
    for r in rows:
        lines.append(f"{r.kernel:<29} {r.path:<8} {r.max_diff:>10.3g} {r.ms:>9.2f}  {r.note}")
    return "\n".join(lines)
