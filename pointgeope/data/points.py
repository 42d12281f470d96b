"""The data path's one container: ``Points``, the tensors of one point cloud or of a batch of them, by name.

A sample is ``Points(pos (n, 3), x (n, C), y (n,), ...)``; a batch of ``B`` samples, made by :func:`collate`,
holds every field concatenated along its first dimension, plus::

    ptr    (B + 1,) int64   0, n_1, n_1 + n_2, ..., N        (cumulative point counts; the model's offset is ptr[1:])
    batch  (N,)     int64   the sample of each point: 0 (n_1 times), 1 (n_2 times), ...

A field that is not per point concatenates the same way: PTv3's ``mix_draw`` of shape ``(1,)`` a sample
becomes ``(B,)``. This is the layout of torch_geometric's ``Data`` and ``Batch`` (attribute access,
``points["key"]``, ``"key" in points``, ``keys()``, iteration over ``(key, value)``, ``to``, ``pin_memory``,
``ptr``, ``batch``, ``num_nodes``, ``num_graphs``), so the model, the engine and a PyG user read either one.

pointgeope's datasets make ``Points`` and not ``Data`` because importing torch_geometric costs every command
~3.5 CPU s of its start (torch_geometric imports ``torch._dynamo``), about half of what ``pointgeope train``
paid before its first step (``bench/bench_command_start.py``). A dataset whose samples are PyG ``Data`` still
works: the loader (:mod:`pointgeope.data.loader`) hands those to PyG's own collation.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator

import torch


class Points:
    """Named tensors of one point cloud or a batch of them (module docstring). ``Points(pos=..., x=..., y=...)``;
    any attribute set later (``points.hierarchy = ...``) is a field too."""

    def __init__(self, **fields):
        vars(self).update(fields)

    def keys(self) -> list[str]:
        """The fields' names, in the order they were set."""
        return list(vars(self))

    def __getitem__(self, key: str):
        """``points["pos"]`` is ``points.pos``, as PyG's ``Data`` reads."""
        if key not in self:
            raise KeyError(f"expected one of the fields {self.keys()}, got {key!r}")
        return vars(self)[key]

    def __contains__(self, key: str) -> bool:
        return key in vars(self)

    def __iter__(self) -> Iterator[tuple[str, object]]:
        """``(name, value)`` of every field, as PyG's ``Data`` iterates."""
        return iter(list(vars(self).items()))

    @property
    def num_nodes(self) -> int:
        """The points held, of every cloud: the rows of ``pos``, else of ``x``."""
        return _rows(self, 0, 1)

    @property
    def num_graphs(self) -> int:
        """The clouds held: ``len(ptr) - 1`` for a batch, 1 for a sample."""
        return self.ptr.numel() - 1 if "ptr" in self else 1

    def apply(self, fn: Callable) -> Points:
        """A new ``Points`` of ``fn(value)`` for every field that is a tensor or has ``fn``'s method (a
        ``PointHierarchy`` moves with ``to`` and ``pin_memory`` too); other fields as they are."""
        out = Points()
        for key, value in self:
            setattr(out, key, fn(value) if isinstance(value, torch.Tensor) or hasattr(value, "to") else value)
        return out

    def to(self, device, non_blocking: bool = False) -> Points:
        """Every field on ``device`` (a new ``Points``; ``non_blocking`` as ``Tensor.to``'s)."""
        return self.apply(lambda v: v.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> Points:
        """Every field in pinned host memory (a new ``Points``; the ``DataLoader`` calls it with ``pin_memory``)."""
        return self.apply(lambda v: v.pin_memory())

    def __repr__(self) -> str:
        def shape(v):
            return list(v.shape) if isinstance(v, torch.Tensor) else type(v).__name__
        return "Points(" + ", ".join(f"{k}={shape(v)}" for k, v in self) + ")"


def _rows(item: Points, i: int, total: int) -> int:
    """The points of ``item`` (sample ``i + 1`` of ``total``): its ``pos``'s rows, else its ``x``'s."""
    for key in ("pos", "x"):
        if isinstance(value := getattr(item, key, None), torch.Tensor):
            return value.shape[0]
    raise ValueError(f"expected sample {i + 1} of {total} of a batch to carry a 'pos' or 'x' tensor, got keys "
                     f"{item.keys()}")


def collate(items: list[Points]) -> Points:
    """``B`` samples -> one batch (module docstring): each field concatenated along dim 0, with ``ptr`` and
    ``batch``. Every sample must carry the same fields."""
    if not items:
        raise ValueError("expected at least one sample to collate, got none")
    keys = items[0].keys()
    for i, item in enumerate(items[1:], start=2):
        if set(item.keys()) != set(keys):
            raise ValueError(f"expected every sample of a batch to carry the same fields, got {sorted(keys)} in "
                             f"sample 1 and {sorted(item.keys())} in sample {i} of {len(items)}")
    counts = torch.tensor([_rows(item, i, len(items)) for i, item in enumerate(items)], dtype=torch.long)
    out = Points()
    for key in keys:
        values = [getattr(item, key) for item in items]
        setattr(out, key, torch.cat(values) if isinstance(values[0], torch.Tensor) else values)
    out.ptr = torch.cat([counts.new_zeros(1), counts.cumsum(0)])
    out.batch = torch.repeat_interleave(torch.arange(len(items)), counts)
    return out
