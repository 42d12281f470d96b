"""The fused attention's backward summed by source point: the kNN lists' transpose and its Triton launches.

The fused ops of ``fused_attention`` read row ``idx[i, j]`` of a source for query ``i``, neighbour ``j``, so
their backward sums every pair's gradient into that row, over the pairs with ``idx[i, j] = p``: ``relation``
``gkey[p] = sum g_ij``; standard GeoPE's ``frame_relation`` ``gP[p] = sum R_i g_ij``; ``aggregate``
``gv[p] = sum p_ij gy_i`` (the attention weights of the pair's channel group). Two ways:

=============  =========================================================================================
``"sorted"``   one program per tile of source rows sums its rows' pairs, read from the transpose
               of the kNN lists (:func:`transpose`), in registers, and stores each row once
               (``triton_gather.py``; the aggregation's backward kernel stores its weights ``(N, k, G)``
               for it): no atomics, the same bits in every run, so these three ops keep Triton under
               ``torch.use_deterministic_algorithms(True)``
``"atomic"``   one program per tile of queries adds each pair into its row with float32 atomics
               (``triton_attention.py``), in the GPU's order
=============  =========================================================================================

Linear GeoPE's relation sums with atomics either way. :data:`SCATTER` chooses: ``"sorted"``, ``"atomic"`` or
``"auto"`` (the default): sorted where ``torch.use_deterministic_algorithms(True)`` asks for reproducible sums
(where the atomic kernels would leave Triton for torch), else atomic, the kernels the GPU runs measured. The
sorted sums are tested to equal the definition and to be deterministic, but have not run on a GPU: their
transpose costs one sort of ``N k`` integers per neighbourhood (cached on ``idx``) and they read per pair the
query's rotation coefficients (standard GeoPE) or the pair's weights (aggregation, written once more), against
float32 atomics into scattered rows, which the GPU profile showed as the cost (``docs/gpu.md``).
``bench/bench_relation_backward.py`` (a step of ``bench/gpu_check.sh``) times both and sweeps :data:`SETTINGS`;
its figures decide whether ``"sorted"`` becomes the default.

The transpose depends on ``idx`` only, which is fixed per level of the point hierarchy and shared by the
layers of that level and by their relation and aggregation: it is computed once and kept on the ``idx``
tensor itself (as long as it lives and is not changed in place).
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import Tensor

from pointgeope.model.kernel_choice import kernel_module
from pointgeope.model.kernels import launch_device

__all__ = ["SCATTERS", "SCATTER", "FRAME_TURN_FIRST", "SETTINGS", "Transpose", "transpose", "sorted_backward",
           "forget_transposes", "scatter", "setting", "atomics", "tiles", "relation_key_grad", "frame_point_grad",
           "aggregate_value_grad"]

SCATTERS = ("sorted", "atomic")
SCATTER = "auto"        # how the fused attention's backward sums into the source rows (module docstring)
# Standard GeoPE's sorted sum in two passes: the queries' programs store the turned pairs R_i g_ij, (N, k, C) in
# the accumulation type, and relation_gather sums them (reads and writes N k C values once more), instead of
# frame_gather turning each pair as it sums (reads the query's five coefficients a pair). Which is faster is the
# GPU's to say (bench_relation_backward times both); the fused one is the default: no (N, k, C) buffer.
FRAME_TURN_FIRST = False
# Tiles of each sorted kernel: pairs a chunk (0: k rounded up to a power of two, a row's mean count), the budget
# of elements a (BLOCK_P, BLOCK_T, BLOCK_C) tile (halved for float64), rows a tile at most, warps. Larger tiles
# of the frame kernel (five coefficients a pair) and of the aggregation's make ptxas spill a few bytes at some
# sizes (bench/triton_compile_check.py checks every default without spills, Triton 3.6 and 3.9);
# bench_relation_backward sweeps them on the GPU.
SETTINGS = {"relation_gather": {"block_t": 0, "budget": 4096, "rows": 8, "warps": 8},
            "frame_gather": {"block_t": 0, "budget": 2048, "rows": 4, "warps": 8},
            "aggregate_gather": {"block_t": 0, "budget": 2048, "rows": 8, "warps": 8}}
_CACHE = "_pointgeope_transpose"


@dataclass(frozen=True)
class Transpose:
    """The kNN lists ``idx (N, k)`` by source row: the pairs of row ``p`` are ``order[starts[p]:starts[p + 1]]``
    (pair numbers ``i k + j``, increasing), ``order (N k,)`` int32 (int64 from 2^31 pairs), ``starts (R + 1,)``
    int64."""

    order: Tensor
    starts: Tensor


def transpose(idx: Tensor, rows: int) -> Transpose:
    """The :class:`Transpose` of ``idx (N, k)`` (rows ``0 .. rows - 1``; others belong to no row): a stable sort
    of ``idx``'s entries and each row's first position by binary search, both deterministic on CUDA. Cached
    on ``idx`` (module docstring)."""
    key = (idx._version, rows, tuple(idx.shape), idx.device)
    cached = getattr(idx, _CACHE, None)
    if cached is not None and cached[0] == key:
        return cached[1]
    sources, order = torch.sort(idx.reshape(-1), stable=True)
    starts = torch.searchsorted(sources, torch.arange(rows + 1, device=idx.device, dtype=sources.dtype))
    result = Transpose(order.to(torch.int32) if order.numel() < 2 ** 31 else order, starts)
    setattr(idx, _CACHE, (key, result))
    return result


def forget_transposes(tensors) -> None:
    """Drop the transposes cached on ``tensors``: before a CUDA graph records a step, so that it records their
    sort instead of a transpose of the batch it warmed up on (``engine/graphs.py``)."""
    for t in tensors:
        if hasattr(t, _CACHE):
            delattr(t, _CACHE)


def sorted_backward() -> bool:
    """Whether the fused attention's backward sums by source point (:data:`SCATTER`)."""
    if SCATTER not in ("auto", *SCATTERS):
        raise ValueError(f"gather_backward.SCATTER: expected one of {('auto', *SCATTERS)}, got {SCATTER!r}")
    if SCATTER == "auto":
        return torch.are_deterministic_algorithms_enabled()
    return SCATTER == "sorted"


@contextlib.contextmanager
def scatter(way: str, turn_first: bool = False) -> Iterator[None]:
    """:data:`SCATTER` set to ``way`` (and :data:`FRAME_TURN_FIRST` to ``turn_first``) inside the block, then
    restored (``info --check``, benchmarks): a setting of the process, not of a thread."""
    global SCATTER, FRAME_TURN_FIRST  # noqa: PLW0603 - the process-wide settings this block sets and restores
    if way not in SCATTERS:
        raise ValueError(f"expected a scatter in {SCATTERS}, got {way!r}")
    saved, SCATTER = (SCATTER, FRAME_TURN_FIRST), way
    FRAME_TURN_FIRST = turn_first
    try:
        yield
    finally:
        SCATTER, FRAME_TURN_FIRST = saved


@contextlib.contextmanager
def setting(kernel: str, value: dict) -> Iterator[None]:
    """``SETTINGS[kernel]`` set to ``value`` inside the block, then restored (``bench_relation_backward``'s
    sweep): a setting of the process, not of a thread."""
    saved = SETTINGS[kernel]
    SETTINGS[kernel] = value
    try:
        yield
    finally:
        SETTINGS[kernel] = saved


def atomics() -> bool:
    """Whether ``relation``, ``frame_relation`` and ``aggregate`` sum with atomics now (the registry's
    ``atomics``)."""
    return not sorted_backward()


def tiles(kernel: str, k: int, width: int, f64: bool = False, setting: dict | None = None) -> tuple[int, int, int]:
    """(BLOCK_P, BLOCK_T, BLOCK_C) of the sorted ``kernel`` (its :data:`SETTINGS`, or ``setting``): powers of two,
    ``BLOCK_C`` holding ``width``, ``BLOCK_P`` filling the budget (at most ``rows``)."""
    import triton

    setting = setting or SETTINGS[kernel]
    block_t = setting["block_t"] or triton.next_power_of_2(k)
    block_c = triton.next_power_of_2(width)
    budget = setting["budget"] // (2 if f64 else 1)
    return max(1, min(setting["rows"], budget // (block_t * block_c))), block_t, block_c


def _launch(name: str, rows: int, c: int, k: int, f64: bool, *args, device: torch.device) -> None:
    """Kernel ``name`` of ``triton_gather`` over tiles of ``rows`` source rows and ``c`` channels (64 at most
    a program, as the relations' own kernels)."""
    import triton

    bp, bt, bc = tiles(name, k, min(c, 64), f64)
    grid = (triton.cdiv(rows, bp), triton.cdiv(c, bc))
    with launch_device(device):
        getattr(kernel_module("pointgeope.model.triton_gather"), name)[grid](
            *args, F64=f64, BLOCK_P=bp, BLOCK_T=bt, BLOCK_C=bc, num_warps=SETTINGS[name]["warps"])


def relation_key_grad(g: Tensor, idx: Tensor, rows: int) -> Tensor:
    """``gkey[p] = sum_{(i, j): idx[i, j] = p} g[i, j]``, ``(rows, C)`` in the accumulation type (float32, or
    float64 for float64 ``g``), from ``g (N, k, C)`` contiguous."""
    k, c = idx.shape[1], g.shape[-1]
    f64 = g.dtype == torch.float64
    gkey = torch.empty(rows, c, dtype=torch.float64 if f64 else torch.float32, device=g.device)
    t = transpose(idx, rows)
    _launch("relation_gather", rows, c, k, f64, g, t.order, t.starts, gkey, rows, c, device=g.device)
    return gkey


def frame_point_grad(g: Tensor, idx: Tensor, tables: Tensor) -> Tensor:
    """``gP[p] = sum_{(i, j): idx[i, j] = p} R_i g[i, j]`` (``R_i g = sum_o T_o[i] g[.., c + o]``), ``(N, C)`` in
    the tables' dtype, from ``g (N, k, C)`` contiguous and the points' ``rotation_tables (5, N, C)``."""
    (n, k), c = idx.shape, g.shape[-1]
    gpoints = torch.empty(n, c, dtype=tables.dtype, device=g.device)
    t = transpose(idx, n)
    _launch("frame_gather", n, c, k, tables.dtype == torch.float64, g, t.order, t.starts, tables, gpoints, n, k,
            c, device=g.device)
    return gpoints


def aggregate_value_grad(probs: Tensor, gy: Tensor, idx: Tensor, rows: int) -> Tensor:
    """The aggregation's ``gv[r, c] = sum_{(i, j): idx[i, j] = r} p[i, j, c mod G] gy[i, c]``, ``(rows, C)`` in
    ``probs``' dtype, from the attention weights ``probs (N, k, G)`` and ``gy (N, C)``, both contiguous."""
    k, c, groups = idx.shape[1], gy.shape[1], probs.shape[2]
    gv = torch.empty(rows, c, dtype=probs.dtype, device=gy.device)
    t = transpose(idx, rows)
    _launch("aggregate_gather", rows, c, k, probs.dtype == torch.float64, probs, gy, t.order, t.starts, gv, rows,
            k, c, groups, device=gy.device)
    return gv
