"""What the layers of a PTv1 stage compute from the hierarchy alone, computed once per forward and shared.

The attention layers of a stage, encoder and decoder, take the same points ``coord (N_s, 3)`` and the same
neighbours ``idx (N_s, k)`` of the hierarchy. What they derive from those constants alone (GeoPE's rotation
tables ``(5, N_s, C)``, ``rotation.rotation_tables``; the pair displacements ``p_j - p_i``, ``(N_s, k, 3)``,
:func:`displacements`; the neighbours as int64 where they came in another integer type, :func:`int64`) is the
same in every layer, so inside :func:`shared` it is built by the first layer and returned to the others: on a
GPU, fewer kernel launches a step (each a few microseconds of the host's time, which a 2 x 80k step waits on)
and one tensor kept for the backward instead of one per layer. Nothing writes into what is shared and it
carries no gradient, so sharing changes no value: each layer gets the very tensor it would have built.

A memo entry is keyed by its inputs' ``id`` and in-place write counter (``_version``: a tensor written since
gets a new entry) and a tag; the memo holds the input tensors, so an ``id`` cannot be reused while it lives,
and it is dropped when :func:`shared`'s block ends (``PointTransformerSeg.body``'s forward). Outside the block
every call builds its own. So a memo lives for one forward: a training step's and an evaluation's each have
their own, the backward runs outside it, a CUDA graph records the forward with its sharing (a replay computes
each shared tensor once from the new inputs), and it is a ``ContextVar``: another thread starts without one.
It keeps each stage's shared tensors until the forward ends: in training the backward keeps them anyway; in
evaluation the displacements ``(N_s, k, 3)`` outlive the stage's layers, less than the layer's own ``(N_s, k, C)``
pair tensors (``C >= 32``).
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable, Iterator
from contextvars import ContextVar

import torch
from torch import Tensor

__all__ = ["shared", "memoized", "displacements", "int64"]

# Inside ``shared()``: (tag, (id, version) of each input) -> (inputs, result)
_MEMO: ContextVar[dict | None] = ContextVar("pointgeope_stage_memo", default=None)


@contextlib.contextmanager
def shared() -> Iterator[None]:
    """Within the block, :func:`memoized` results of the same inputs (the same objects, unchanged since) are
    built once and then returned again (module docstring)."""
    token = _MEMO.set({})
    try:
        yield
    finally:
        _MEMO.reset(token)


def _version(t: Tensor) -> int:
    """``t``'s in-place write counter (inference tensors keep none: 0; they are not written in a forward)."""
    return 0 if t.is_inference() else t._version


def memoized(tag: Hashable, inputs: tuple[Tensor, ...], build: Callable[[], Tensor]) -> Tensor:
    """``build()``, a function of ``inputs`` (constants) and ``tag`` alone; inside :func:`shared` built once per
    ``tag`` and inputs, outside built at every call."""
    memo = _MEMO.get()
    if memo is None:
        return build()
    key = (tag, *((id(t), _version(t)) for t in inputs))
    if key not in memo:
        memo[key] = (inputs, build())
    return memo[key][1]


def displacements(coord: Tensor, idx: Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """``(coord[idx] - coord.unsqueeze(1)).to(dtype)``: ``p_j - p_i``, ``(N, k, 3)``, for ``coord (N, 3)`` and
    ``idx (N, k)``, in ``dtype`` (default ``coord``'s); shared inside :func:`shared` where ``coord`` needs no
    gradient (with one, each layer's own displacements carry its share of it, summed as before). A constant's
    other ``dtype`` (the bf16 rows of autocast's position encoding) is written by the subtraction itself
    (``out=``: computed in ``coord``'s type, rounded to nearest even once on the store, the bits of the cast;
    one launch, not a cast of a launch of its own)."""
    from pointgeope.model.rotation import constant

    dtype = coord.dtype if dtype is None else dtype

    def build() -> Tensor:
        if dtype == coord.dtype or not constant(coord):
            return (coord[idx] - coord.unsqueeze(1)).to(dtype)
        out = torch.empty((*idx.shape, 3), dtype=dtype, device=coord.device)
        return torch.sub(coord[idx], coord.unsqueeze(1), out=out)

    return memoized(("displacements", dtype), (coord, idx), build) if constant(coord) else build()


def int64(idx: Tensor) -> Tensor:
    """``idx.long()``: the neighbour lists as the layers' kernels take them; itself where int64 already (the kNN's),
    else one copy per stage inside :func:`shared`. A copy per layer would be a new memo key in every layer, so
    nothing keyed on ``idx`` (:func:`displacements`) would be shared."""
    return idx if idx.dtype == torch.int64 else memoized("int64", (idx,), idx.long)
