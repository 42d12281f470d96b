"""The sampling and neighbourhood hierarchy of Point Transformer, computed from the coordinates alone.

Everything the network's point ops produce (FPS samples, kNN neighbourhoods, 3-NN interpolation) depends
only on the input coordinates, so it can be computed before the network runs: in the data loader's CPU
workers with the fast CPU backends (``numba``'s bucket FPS and kd-tree kNN) while the GPU trains, or by the model
itself. For stages ``s = 0 .. S-1`` with ``strides[s]`` and ``neighbours[s] = k_s``::

    coord_0      = coord                                        (strides[0] == 1 keeps every point)
    sample_s     = fps(coord_{s-1}, stride_s)                   rows of stage s-1,  (N_s,)
    coord_s      = coord_{s-1}[sample_s]
    down_s       = knn(coord_s -> coord_{s-1}, k_s)             rows of stage s-1,  (N_s, k_s)  transition down
    neighbours_s = knn(coord_s -> coord_s, k_s)                 rows of stage s,    (N_s, k_s)  attention
    up_s, up_dist2_s = knn(coord_s -> coord_{s+1}, 3)           rows of stage s+1,  (N_s, 3)    transition up

(``sample_s`` and ``down_s`` are ``None`` at stride 1.) Two kNN of the list are one search: when ``k_s ==
k_{s-1}``, ``down_s = neighbours_{s-1}[sample_s]`` (each query of ``down_s`` is a point of stage ``s-1`` whose
``k_s`` neighbours there ``neighbours_{s-1}`` already holds; every backend answers a query from its point, its
cloud and ``k`` alone), so it is gathered, not searched again. On the host's exact backends (pykdtree, scipy,
torch) ``up_s`` is read from ``neighbours_{s+1}`` for the sampled rows and from ``neighbours_s`` for the rows it
settles, the rest searched (``up_known``: the same result, bit for bit). On the tree backends every stage's
tree is built once for the kNN that search it (``knn.shared_trees``); with ``numba``'s (``kd_knn``) the FPS of the
next stage takes that tree's kd order (``knn.kd_order``) and a searched transition down answers its queries, the
samples, from their own leaves (``knn_rows``); where ``k_s > k_{s-1}`` the samples are drawn before stage ``s-1``'s
own kNN (its tree built first) and both are one search (``knn_rows.knn_with_rows``: a sample's first ``k_{s-1}``
of its first ``k_s``), the same result bit for bit. Every op works per cloud with global
rows, so the hierarchy of a packed batch is the per-cloud hierarchies with their rows shifted by the cloud's start
in each stage, exactly as PyG shifts ``edge_index`` when it batches graphs.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, fields
from itertools import accumulate, pairwise

import torch
from torch import Tensor

from pointgeope.model.ops import backends
from pointgeope.model.ops.backends import KNN_BACKENDS, OpsBackends, resolve
from pointgeope.model.ops.checks import check_coordinates, check_count
from pointgeope.model.ops.fps import fps, sample_counts
from pointgeope.model.ops.hierarchy_check import check_types
from pointgeope.model.ops.knn import knn, shared_trees
from pointgeope.model.ops.knn_rows import knn_of_rows, knn_with_rows
from pointgeope.model.ops.morton import shared_layouts
from pointgeope.model.ops.offsets import check_offset, counts
from pointgeope.model.ops.up_known import known_up

__all__ = ["PointHierarchy", "HierarchySpec", "UP_NEIGHBOURS"]

UP_NEIGHBOURS = 3  # transition up interpolates from the 3 nearest coarse points
_HOST_EXACT = ("numba", "pykdtree", "scipy", "torch")   # the host's kNN backends with the definition's ties


@dataclass(frozen=True)
class PointHierarchy:
    """Indices (int64) and 3-NN squared distances of every stage (see the module docstring).

    Moves with ``.to(device)`` and ``.pin_memory()``, so a batch (``pointgeope.data.points.Points``, or a
    torch_geometric ``Batch``) carrying it as an attribute moves it along with its tensors."""

    offsets: tuple[Tensor, ...]               # (B,) cumulative counts per stage
    samples: tuple[Tensor | None, ...]        # (N_s,) FPS rows of stage s-1
    down: tuple[Tensor | None, ...]           # (N_s, k_s) rows of stage s-1
    neighbours: tuple[Tensor, ...]            # (N_s, k_s) rows of stage s
    up: tuple[Tensor, ...]                    # (N_s, 3) rows of stage s+1, s < S-1
    up_dist2: tuple[Tensor, ...]              # (N_s, 3) squared distances of ``up``

    @property
    def stages(self) -> int:
        return len(self.offsets)

    @property
    def built(self) -> bool:
        """Made by :class:`HierarchySpec`, or from such a one by :meth:`to`, :meth:`pin_memory` or
        ``padding.pad_hierarchy``: right by construction, so ``ops.hierarchy_check`` reads none of its values (a
        training step reads only its loss on the host). A pickled copy (a loader worker's) keeps the mark; one
        made by the constructor, ``dataclasses.replace`` or :meth:`apply` (any ``fn``: it may change values) has
        none."""
        return self.__dict__.get("_built", False)

    def as_built(self) -> PointHierarchy:
        """This hierarchy, marked :attr:`built` (for its makers only)."""
        object.__setattr__(self, "_built", True)
        return self

    def apply(self, fn) -> PointHierarchy:
        """A new hierarchy with ``fn`` applied to every tensor (not :attr:`built`: ``fn`` may change values)."""
        return PointHierarchy(**{f.name: tuple(None if t is None else fn(t) for t in getattr(self, f.name))
                                 for f in fields(self)})

    def _moved(self, fn) -> PointHierarchy:
        """:meth:`apply` of a ``fn`` that moves tensors, values kept: :attr:`built` if this one is."""
        out = self.apply(fn)
        return out.as_built() if self.built else out

    def to(self, device=None, non_blocking: bool = False) -> PointHierarchy:
        return self._moved(lambda t: t.to(device=device, non_blocking=non_blocking))

    def pin_memory(self) -> PointHierarchy:
        return self._moved(lambda t: t.pin_memory())

    def coords(self, coord: Tensor) -> list[Tensor]:
        """Coordinates of every stage, ``coord_s = coord_{s-1}[sample_s]``."""
        out = [coord if self.samples[0] is None else coord[self.samples[0]]]
        for sample in self.samples[1:]:
            out.append(out[-1] if sample is None else out[-1][sample])
        return out


@dataclass(frozen=True)
class HierarchySpec:
    """What a network needs: its ``strides`` and ``neighbours`` per stage and the ops ``backends``.

    Calling it builds the hierarchy of ``coord (N, 3)``, ``offset (B,)`` on their device (the backends'
    defaults of that device: on the CPU ``numba`` for both ops). Picklable, so a data loader's
    workers can hold one."""

    strides: tuple[int, ...]
    neighbours: tuple[int, ...]
    backends: OpsBackends = OpsBackends()

    def __post_init__(self) -> None:
        """One stride and one ``k`` a stage, each an int ``>= 1`` (``TypeError`` / ``ValueError`` naming it)."""
        if len(self.strides) != len(self.neighbours):
            raise ValueError(f"expected one stride and one neighbour count a stage, got strides {self.strides} "
                             f"and neighbours {self.neighbours}")
        for name in ("strides", "neighbours"):
            for s, value in enumerate(getattr(self, name)):
                check_count(f"{name}[{s}]", value)

    def __call__(self, coord: Tensor, offset: Tensor | list[int]) -> PointHierarchy:
        """The hierarchy of ``coord (N, 3)`` in clouds ``offset (B,)`` (a host list or tensor spares the
        device-to-host copies of device offsets). With a Triton backend every stage's cloud is sorted and
        tiled once for its FPS and kNN (``morton.shared_layouts``), with a tree backend each stage's tree is built
        once (``knn.shared_trees``). ``coord`` is checked finite and within
        ``checks.COORD_LIMIT`` here, once (``ValueError`` naming it): every stage's points are rows of it."""
        coord = coord.detach()
        if coord.dim() != 2 or coord.shape[1] != 3:
            raise ValueError(f"expected coord of shape (N, 3), got {tuple(coord.shape)}")
        check_coordinates("coord", coord)
        off = check_offset(offset, coord.shape[0])
        uses_triton = "triton" in (self.backends.fps or backends.fps_backend(coord.device),
                                   self.backends.knn or backends.knn_backend(coord.device))
        with shared_layouts(coord, off) if uses_triton else contextlib.nullcontext(), shared_trees():
            return self._build(coord, off)

    def _build(self, coord: Tensor, off: list[int]) -> PointHierarchy:
        offsets, samples, down, neighbours, coords, near = [], [], [], [], [], []
        c, ahead = coord, None
        for s, (stride, k) in enumerate(zip(self.strides, self.neighbours, strict=True)):
            if stride > 1:
                sample, new_off, group = ahead or self._down(c, off, stride, k, neighbours)
                samples.append(sample)
                down.append(group)
                c, off = c[sample], new_off
            else:
                samples.append(None)
                down.append(None)
            ahead = self._ahead(s, c, off)
            if ahead:                     # this stage's kNN and the next one's transition down, in one search
                idx_d2, (group, _) = knn_with_rows(c, off, k, ahead[0], ahead[1], self.neighbours[s + 1],
                                                   backend=self.backends.knn)
                near.append(idx_d2)
                ahead = (*ahead, group)
            else:
                near.append(knn(c, c, k, off, off, backend=self.backends.knn, check_finite=False))
            neighbours.append(near[-1][0])
            offsets.append(off)
            coords.append(c)
        up = [self._up(s, coords, offsets, samples, near) for s in range(len(coords) - 1)]
        device_offsets = tuple(torch.tensor(o, dtype=torch.long).to(coord.device) for o in offsets)
        return PointHierarchy(device_offsets, tuple(samples), tuple(down), tuple(neighbours),
                              tuple(idx for idx, _ in up), tuple(dist2 for _, dist2 in up)).as_built()

    def _sample(self, c: Tensor, off: list[int], stride: int) -> tuple[Tensor, list[int]]:
        """The FPS samples of the stage after the points ``c`` (clouds ``off``) and their offsets."""
        sample, _ = fps(c, off, stride, backend=self.backends.fps, check_finite=False)
        return sample, list(accumulate(sample_counts(counts(off), stride)))

    def _down(self, c: Tensor, off: list[int], stride: int, k: int, neighbours: list[Tensor]):
        """``(sample_s, offsets_s, down_s)`` of the points ``c`` of stage ``s - 1``: ``down_s`` gathered from
        ``neighbours_{s-1}`` when ``k`` repeats (module docstring), else searched."""
        sample, new_off = self._sample(c, off, stride)
        if neighbours and neighbours[-1].shape[1] == k:           # down_s = neighbours_{s-1}[sample_s]
            return sample, new_off, neighbours[-1][sample]
        group, _ = knn_of_rows(sample, c, k, new_off, off, backend=self.backends.knn, check_finite=False)
        return sample, new_off, group

    def _ahead(self, s: int, c: Tensor, off: list[int]) -> tuple[Tensor, list[int]] | None:
        """The samples of stage ``s + 1`` and their offsets, drawn before stage ``s``'s kNN when the ``numba`` kNN
        is to search the next transition down (its ``k`` larger than stage ``s``'s) with it (``knn_with_rows``);
        each cloud's tree is built first, so the FPS takes its kd order. Else None."""
        if s + 1 == len(self.strides) or self.strides[s + 1] == 1 or self.neighbours[s + 1] <= self.neighbours[s]:
            return None
        if c.device.type != "cpu" or resolve(self.backends.knn, KNN_BACKENDS, c.device, "knn",
                                             self.neighbours[s + 1]) != "numba":
            return None
        from pointgeope.model.ops import kd_knn

        for a, b in pairwise([0, *off]):
            kd_knn.tree_of(c[a:b])
        return self._sample(c, off, self.strides[s + 1])

    def _up(self, s: int, coords: list[Tensor], offsets: list[list[int]], samples: list[Tensor | None],
            near: list[tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
        """``up_s`` and its distances: on the host's exact backends the rows the neighbourhoods settle read from
        them, the others searched (``up_known``, the same result bit for bit), else all searched."""
        def search(rows, rows_off):
            query = coords[s] if rows is None else coords[s][rows]
            return knn(query, coords[s + 1], UP_NEIGHBOURS, rows_off, offsets[s + 1], backend=self.backends.knn,
                       check_finite=False)

        host_exact = coords[s].device.type == "cpu" and resolve(
            self.backends.knn, KNN_BACKENDS, coords[s].device, "knn", UP_NEIGHBOURS) in _HOST_EXACT
        if samples[s + 1] is None or not host_exact or near[s + 1][0].shape[1] < UP_NEIGHBOURS:
            return search(None, offsets[s])
        return known_up(samples[s + 1], (offsets[s], offsets[s + 1]), near[s], near[s + 1], UP_NEIGHBOURS, search)

    def check(self, hierarchy: PointHierarchy, num_points: int, clouds: int) -> None:
        """Raise ``ValueError`` unless ``hierarchy`` has this spec's stages for ``num_points`` in ``clouds`` (its
        fields' types first: ``hierarchy_check.check_types``)."""
        check_types(hierarchy)
        def size(ts, dim):   # of the tensors' sizes along dim those checked here (None: no such dimension)
            return tuple(t.shape[dim] if t.dim() > dim else None for t in ts)

        got = (hierarchy.stages, size(hierarchy.neighbours, 1), *(size(hierarchy.neighbours[:1], 0) or (None,)),
               *(size(hierarchy.offsets[:1], 0) or (None,)))
        want = (len(self.strides), self.neighbours, num_points, clouds)
        if got != want:
            raise ValueError(f"expected a point hierarchy of (stages, k per stage, points, clouds) = {want} "
                             f"(the model's HierarchySpec), got {got}")

