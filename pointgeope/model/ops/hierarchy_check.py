"""The check of a ``PointHierarchy`` a caller hands to the network (``model(coord, feat, offset, hierarchy=h)``):
the indices and distances the network will gather with, and the coordinates they index.

For stages ``s`` of ``N_s`` points (``N_0 = N``, the rows of ``coord``; the module docstring of
:mod:`pointgeope.model.ops.hierarchy` gives the layout)::

    tensor            shape          values
    offsets[s]        (B,)           int64, nondecreasing, offsets[s][-1] = N_s
    samples[s]        (N_s,)         rows of stage s-1, in [0, N_{s-1})         (None at stride 1)
    down[s]           (N_s, k_s)     rows of stage s-1, in [0, N_{s-1})         (None at stride 1)
    neighbours[s]     (N_s, k_s)     rows of stage s, in [0, N_s)
    up[s]             (N_s, 3)       rows of stage s+1, in [0, N_{s+1})         (s < S-1)
    up_dist2[s]       (N_s, 3)       finite, >= 0

Before anything is read, :func:`check_types` (called by ``HierarchySpec.check``, which compares the stages with the
spec's) makes sure each field is a tuple (or list) of tensors, ``None`` only where a stride of 1 samples nothing: a list
of indices where a tensor belongs is named with the type it is, not met as an ``AttributeError`` further on.
The shapes (and each field's number of entries) are checked on every call (attributes: no value is read). The
values are checked where reading them costs no synchronisation, tensors on the CPU, unless ``HierarchySpec`` made
the hierarchy (``PointHierarchy.built``: the loader's and the padded ones, so a CPU training step reads on the host
what a GPU step reads, its loss only), and whenever the caller asks (``values=True``, the network's
``check_finite``): a negative index would wrap to another point and an index past the end read another stage's
memory or stop a GPU with a device assert, a NaN distance or coordinate turn every logit of its cloud into NaN, all
without a word. ``coord`` is checked by the point ops' rule (``check_coordinates``: finite, within ``+-2^60``), as
``HierarchySpec`` checks it when it builds the hierarchy itself. A hierarchy built by ``HierarchySpec`` is right by
construction; one built by hand or loaded from elsewhere is what this is for. That each row's neighbours lie in its
own cloud is not checked (it would take a pass over every index).
"""
from __future__ import annotations

import torch
from torch import Tensor

from pointgeope.geope_checks import check_coordinates, check_finite

__all__ = ["check_hierarchy", "check_types"]

_AGAIN = "build it with model.hierarchy_spec(coord, offset)"
_FIELDS = ("offsets", "samples", "down", "neighbours", "up", "up_dist2")
_NONE_AT_STRIDE_1 = ("samples", "down")


def check_types(hierarchy) -> None:
    """``ValueError`` naming the field and the type it has unless ``hierarchy`` is a ``PointHierarchy`` (an object
    with its six fields) whose fields are tuples or lists of tensors, ``samples`` and ``down`` also ``None``."""
    if not all(hasattr(hierarchy, name) for name in _FIELDS):
        raise ValueError(f"expected hierarchy a PointHierarchy (fields {', '.join(_FIELDS)}), got "
                         f"{type(hierarchy).__name__}; {_AGAIN}")
    for name in _FIELDS:
        entries = getattr(hierarchy, name)
        if not isinstance(entries, (tuple, list)):
            raise ValueError(f"expected hierarchy.{name} a tuple of tensors, one per stage, got "
                             f"{type(entries).__name__}; {_AGAIN}")
        for s, t in enumerate(entries):
            if not (isinstance(t, Tensor) or t is None and name in _NONE_AT_STRIDE_1):
                want = "a tensor or None (at stride 1)" if name in _NONE_AT_STRIDE_1 else "a tensor"
                raise ValueError(f"expected hierarchy.{name}[{s}] {want}, got {type(t).__name__}; {_AGAIN}")


def check_hierarchy(hierarchy, coord: Tensor, strides: tuple[int, ...], values: bool = False) -> None:
    """``ValueError`` naming the tensor (e.g. ``hierarchy.neighbours[1]``) unless ``hierarchy`` fits ``coord (N,
    3)`` and the stages' ``strides`` (module docstring); values read when on the CPU or with ``values``."""
    for name in ("samples", "down", "neighbours", "up", "up_dist2"):           # up: none from the last stage
        want, got = hierarchy.stages - (name in ("up", "up_dist2")), len(getattr(hierarchy, name))
        if got != want:
            raise ValueError(f"expected hierarchy.{name} of {want} entries ({hierarchy.stages} stages), got {got}; "
                             f"{_AGAIN}")
    sizes = [coord.shape[0]] + [n.shape[0] for n in hierarchy.neighbours]      # stage -1 is coord itself
    tensors = []                                                               # (name, tensor, rows it indexes)
    for s in range(hierarchy.stages):
        if (nb := hierarchy.neighbours[s]).dim() != 2:     # its shape gives n, k: named, not "too many values to..."
            raise ValueError(f"expected hierarchy.neighbours[{s}] an integer tensor of shape (N_{s}, k), got "
                             f"{nb.dtype} {tuple(nb.shape)}; {_AGAIN}")
        n, k = hierarchy.neighbours[s].shape
        _shape(f"offsets[{s}]", hierarchy.offsets[s], hierarchy.offsets[0].shape)
        for name, shape, rows in (("samples", (n,), sizes[s]), ("down", (n, k), sizes[s])):
            t = getattr(hierarchy, name)[s]
            if (t is None) != (strides[s] == 1):
                raise ValueError(f"expected hierarchy.{name}[{s}] {'None' if strides[s] == 1 else 'a tensor'} at "
                                 f"stride {strides[s]}, got {'None' if t is None else 'a tensor'}; {_AGAIN}")
            if t is not None:
                _shape(f"{name}[{s}]", t, shape)
                tensors.append((f"{name}[{s}]", t, rows))
        _shape(f"neighbours[{s}]", hierarchy.neighbours[s], (n, k))     # integers: bools' 0/1 would gather rows 0, 1
        tensors.append((f"neighbours[{s}]", hierarchy.neighbours[s], n))
        if s + 1 < hierarchy.stages:
            _shape(f"up[{s}]", hierarchy.up[s], (n, 3))
            _shape(f"up_dist2[{s}]", hierarchy.up_dist2[s], (n, 3), floating=True)
            tensors.append((f"up[{s}]", hierarchy.up[s], sizes[s + 2]))
    on_cpu = coord.device.type == "cpu" and all(t.device.type == "cpu" for _, t, _ in tensors)
    if not (values or on_cpu and not hierarchy.built):
        return
    check_coordinates("coord", coord)
    for s, dist2 in enumerate(hierarchy.up_dist2):
        try:
            check_finite(f"hierarchy.up_dist2[{s}]", dist2)
        except ValueError as err:
            raise ValueError(f"{err}; {_AGAIN}") from None
        if dist2.numel() and dist2.min() < 0:
            raise ValueError(f"expected hierarchy.up_dist2[{s}] >= 0 (squared distances), got {dist2.min().item()}; "
                             f"{_AGAIN}")
    for s, offsets in enumerate(hierarchy.offsets):
        if offsets.numel() and (int(offsets[-1]) != sizes[s + 1] or bool((torch.diff(offsets) < 0).any())):
            raise ValueError(f"expected hierarchy.offsets[{s}] nondecreasing and ending at the stage's "
                             f"{sizes[s + 1]} points, got {offsets.tolist()[:8]}; {_AGAIN}")
    for name, t, rows in tensors:
        lo, hi = torch.aminmax(t) if t.numel() else (0, 0)        # one pass; the mask only for the message
        if lo < 0 or hi >= rows:
            outside = (t < 0) | (t >= rows)
            first = outside.reshape(t.shape[0], -1).any(1).nonzero()[0].item()
            raise ValueError(f"expected hierarchy.{name} rows in [0, {rows}), got {int(outside.sum())} outside (the "
                             f"first in row {first}: {t[first].tolist()}); {_AGAIN}")


def _shape(name: str, t: Tensor, shape: tuple[int, ...], floating: bool = False) -> None:
    """``t`` a tensor of ``shape``, of integers (indices) or with ``floating`` of floats (distances)."""
    kind = t.is_floating_point() if isinstance(t, Tensor) else None
    if not (isinstance(t, Tensor) and tuple(t.shape) == tuple(shape) and kind == floating and not t.is_complex()
            and t.dtype != torch.bool):
        got = f"{t.dtype} {tuple(t.shape)}" if isinstance(t, Tensor) else type(t).__name__
        raise ValueError(f"expected hierarchy.{name} {'a float' if floating else 'an integer'} tensor of shape "
                         f"{tuple(shape)}, got {got}; {_AGAIN}")
