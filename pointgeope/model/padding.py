"""Padded batches: a batch grown to fixed sizes by one dummy cloud, whose rows change nothing that is real.

A CUDA graph replays one recorded sequence of kernels on tensors of fixed shapes (``engine/graphs.py``), while
every training batch has its own number of points at every stage. Padding a batch to a few sizes lets one
graph serve every batch of a size: for stage sizes ``n_s`` (the real rows) and padded sizes ``N_s > n_s``,
one more cloud of ``d_s = N_s - n_s`` rows is appended at every stage::

    coord, feat      zeros                                      (d_0, 3), (d_0, C)
    label            ignore_index: no loss                      (d_0,)
    offsets_s        + [N_s]                                    (B + 1,)
    samples_s        the first dummy row of stage s-1           (d_s,)
    down_s, neighbours_s, up_s                                  (d_s, k) rows of the dummy cloud only
    up_dist2_s       ones

Every real row gathers real rows only (the real hierarchy is untouched, and the dummy cloud comes after the
real ones at every stage, so the real rows are the prefix ``[0, n_s)``), the head's mean is per cloud, and the
loss skips the dummy labels. What remains shared by all rows is batch norm's statistics: inside
:func:`batch_rows` every batch norm of ``norm.py`` in training takes them over the real prefix only,
``mean_c = sum_{r < n} x_rc / n``, ``var_c = sum_{r < n} (x_rc - mean_c)^2 / n`` (``norm.prefix_batch_norm``).
The real rows' outputs, the loss, every gradient and the running statistics are then those of the unpadded
batch (``tests/model/test_padding.py``). The valid counts are 0-dim device tensors, so one graph serves them all.

A batch norm learns its rows' prefix from its input's row count ``R``: ``N_s`` (point rows) or ``N_s k_s`` (the
attention's and the transition down's pair rows). :func:`padded_sizes` keeps these distinct across stages.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from contextvars import ContextVar

import torch
from torch import Tensor

from pointgeope.model.ops.hierarchy import PointHierarchy

__all__ = ["stage_sizes", "padded_sizes", "pad_batch", "pad_hierarchy", "row_prefixes", "batch_rows", "valid_rows",
           "padded"]

_ROWS: ContextVar[dict[int, Tensor] | None] = ContextVar("pointgeope_batch_rows", default=None)


def stage_sizes(hierarchy: PointHierarchy) -> tuple[int, ...]:
    """Rows of every stage, from the shapes alone (no device read)."""
    return tuple(n.shape[0] for n in hierarchy.neighbours)


def padded_sizes(points: int, clouds: int, strides: Sequence[int], neighbours: Sequence[int]) -> tuple[int, ...]:
    """The padded stage sizes ``N_s`` of a batch of ``points`` in ``clouds``, from those two alone, so that few
    sizes occur over a run: ``N_0`` the smallest multiple of ``2^max(6, floor(log2(points + 1)) - 4)`` above
    ``points`` (at most about 1/16 more rows), then ``N_s = ceil(N_{s-1} / stride_s) + B``, above any stage's
    ``n_s = sum_b max(1, n_b // stride_s) < n_{s-1} / stride_s + B`` (stride 1: ``N_s = N_{s-1}``). Every row
    count a batch norm sees (``N_s``, ``N_s k_s``) names one stage's rows: a count that would name two is grown
    by one row."""
    quantum = 2 ** max(6, (points + 1).bit_length() - 5)
    out: list[int] = []
    for s, (stride, k) in enumerate(zip(strides, neighbours, strict=True)):
        if s == 0 or stride == 1:
            size = (points // quantum + 1) * quantum if s == 0 else out[-1]
        else:
            size = -(-out[-1] // stride) + clouds
            taken = {r for t, m in enumerate(out) for r in (m, m * neighbours[t])}
            while size in taken or size * k in taken:
                size += 1
        out.append(size)
    return tuple(out)


def _extend(rows: Tensor | None, extra: int, value) -> Tensor | None:
    """``rows`` with ``extra`` more rows of ``value``, of ``rows``' width (None stays None)."""
    if rows is None:
        return None
    shape = (extra,) + tuple(rows.shape[1:])
    return torch.cat([rows, rows.new_full(shape, value)])


def pad_batch(coord: Tensor, feat: Tensor, label: Tensor, h: PointHierarchy, sizes: Sequence[int],
              ignore_index: int) -> tuple[Tensor, Tensor, Tensor, Tensor, PointHierarchy]:
    """``(coord, feat, offset, label, hierarchy)`` of the batch grown to ``sizes``: zero points labelled
    ``ignore_index`` and :func:`pad_hierarchy`; ``offset`` is the padded hierarchy's ``offsets[0]`` (B + 1,)."""
    padded = pad_hierarchy(h, sizes)
    extra = sizes[0] - coord.shape[0]
    return (_extend(coord, extra, 0.0), _extend(feat, extra, 0.0), padded.offsets[0],
            _extend(label, extra, ignore_index), padded)


def pad_hierarchy(h: PointHierarchy, sizes: Sequence[int]) -> PointHierarchy:
    """``h`` of stage sizes ``n_s`` grown to ``sizes`` ``N_s`` by the dummy cloud (module docstring)."""
    real = stage_sizes(h)
    if len(sizes) != len(real) or any(big <= n for big, n in zip(sizes, real, strict=True)):
        raise ValueError(f"expected one padded size above each stage's rows {real}, got {tuple(sizes)}")
    extra = [big - n for big, n in zip(sizes, real, strict=True)]
    below = [0] + list(real[:-1])             # the first dummy row of stage s-1
    padded = PointHierarchy(
        offsets=tuple(torch.cat([o, o.new_full((1,), big)]) for o, big in zip(h.offsets, sizes, strict=True)),
        samples=tuple(_extend(t, d, b) for t, d, b in zip(h.samples, extra, below, strict=True)),
        down=tuple(_extend(t, d, b) for t, d, b in zip(h.down, extra, below, strict=True)),
        neighbours=tuple(_extend(t, d, n) for t, d, n in zip(h.neighbours, extra, real, strict=True)),
        up=tuple(_extend(t, d, n) for t, d, n in zip(h.up, extra[:-1], real[1:], strict=True)),
        up_dist2=tuple(_extend(t, d, 1.0) for t, d in zip(h.up_dist2, extra[:-1], strict=True)))
    return padded.as_built() if h.built else padded


def row_prefixes(real: Sequence[int], sizes: Sequence[int], neighbours: Sequence[int]) -> dict[int, int]:
    """Every row count a batch norm of the padded batch sees, with its real prefix: ``N_s -> n_s`` and
    ``N_s k_s -> n_s k_s`` (as 0-dim device tensors, the argument of :func:`batch_rows`)."""
    out: dict[int, int] = {}
    for n, big, k in zip(real, sizes, neighbours, strict=True):
        for rows, valid in ((big, n), (big * k, n * k)):
            if out.setdefault(rows, valid) != valid:
                raise ValueError(f"padded row count {rows} names two prefixes: use padded_sizes")
    return out


@contextlib.contextmanager
def batch_rows(prefixes: dict[int, Tensor]) -> Iterator[None]:
    """Inside: a batch norm in training over ``R`` rows takes its statistics over the first ``prefixes[R]``
    (module docstring); an ``R`` not listed raises, rather than mix dummy rows into the statistics."""
    token = _ROWS.set(prefixes)
    try:
        yield
    finally:
        _ROWS.reset(token)


def valid_rows(rows: int) -> Tensor | None:
    """The real prefix of an ``rows``-row input inside :func:`batch_rows` (None outside)."""
    prefixes = _ROWS.get()
    if prefixes is None:
        return None
    if rows not in prefixes:
        raise ValueError(f"a batch norm over {rows} rows inside a padded batch of row counts {sorted(prefixes)}")
    return prefixes[rows]


def padded() -> bool:
    """Whether this code runs inside :func:`batch_rows`: a padded batch's step (what ``norm.PLAIN_KERNEL``'s CUDA
    default asks at each call). No value is read."""
    return _ROWS.get() is not None
