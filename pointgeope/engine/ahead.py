"""Batches on the accelerator with their point hierarchy built one batch ahead, beside the step.

While the GPU runs the step of batch ``i``, a background thread (:class:`~pointgeope.engine.prefetch.Prefetch`)
copies batch ``i + 1`` to the device and builds its point hierarchy (FPS, kNN, 3-NN: the model's
``hierarchy_spec``, on the device's kernels) on a second CUDA stream. Its coordinates are known as soon as
the loader hands it over, so a step takes the larger of network and hierarchy rather than their sum
(``data.hierarchy: beside``, :mod:`pointgeope.engine.placement`)::

    side stream (thread):  copy + hierarchy(i+1) | copy + hierarchy(i+2) | ...
    main stream:           step(i)               | step(i+1)             | ...

The stream rules that make it safe: the thread records an event after a batch's work and the consumer's
stream waits for it (a wait on the device, not the host); every tensor made on the side stream is marked
as used by the consumer's stream (``record_stream``), so the caching allocator does not give its memory to
the side stream again while the step still reads it. The thread passes host offsets to the hierarchy, so
it never waits for the device to learn the clouds' sizes. :func:`copy_and_build` is the producer's side
(training's :class:`HierarchyAhead`, and ``vote_batches.stack`` in the thread that cuts evaluation's and
predict's pieces), :func:`wait_for_side_stream` the consumer's. On a CPU device they run without streams
(a thread making the next batch's hierarchy), which is how the tests check that it hands over the same
batches and hierarchies in the same order.
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

import torch
from torch import Tensor

from pointgeope.engine.prefetch import Prefetch
from pointgeope.model.ops.hierarchy import HierarchySpec, PointHierarchy

__all__ = ["HierarchyAhead", "with_index", "side_stream", "on_side_stream", "copy_and_build", "wait_for_side_stream"]

T = TypeVar("T")
_local = threading.local()


def with_index(device: torch.device) -> torch.device:
    """``device`` with its index (a bare ``cuda``: this thread's current device). Call it in the consumer's
    thread: a background thread's current device is its own (``cuda:0`` unless it sets one)."""
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def side_stream(device: torch.device) -> torch.cuda.Stream:
    """This thread's second CUDA stream on ``device`` (a :func:`with_index` one), made on first use."""
    if device.index is None:
        raise ValueError(f"expected a CUDA device with its index (ahead.with_index), got {device}")
    streams = getattr(_local, "streams", None)
    if streams is None:
        streams = _local.streams = {}
    if device not in streams:
        torch.cuda.set_device(device)                      # this thread's current device
        streams[device] = torch.cuda.Stream(device)
    return streams[device]


def on_side_stream(make: Callable[[], T], device: torch.device) -> tuple[T, torch.cuda.Event]:
    """``make()`` (copies to ``device`` and the hierarchy built from them) run on this thread's side stream,
    and the event that marks its end."""
    stream = side_stream(device)
    with torch.cuda.stream(stream):
        made = make()
        event = torch.cuda.Event()
        event.record(stream)
    return made, event


def copy_and_build(copy: Callable[[], T], pos: Callable[[T], Tensor], spec: HierarchySpec, offsets: list[int],
                   device: torch.device) -> tuple[T, PointHierarchy, torch.cuda.Event | None]:
    """``copy()`` (a batch's tensors sent to ``device``) and the hierarchy ``spec(pos(copied), offsets)`` of
    its points (host ``offsets``: no wait for the device), on this thread's side stream on CUDA, with the
    event that marks their end (:func:`wait_for_side_stream`); elsewhere in line, event ``None``."""
    def made():
        copied = copy()
        return copied, spec(pos(copied), offsets)
    if device.type != "cuda":
        return (*made(), None)
    (copied, hierarchy), event = on_side_stream(made, device)
    return copied, hierarchy, event


def wait_for_side_stream(event: torch.cuda.Event, tensors: Iterable[Tensor], hierarchy: PointHierarchy | None,
                         device: torch.device) -> None:
    """The consumer's side of :func:`on_side_stream`: its stream waits for ``event`` (on the device), and the
    tensors are marked as used by it, so their memory is not reused before its work on them is done."""
    main = torch.cuda.current_stream(device)
    main.wait_event(event)
    for t in tensors:
        t.record_stream(main)
    if hierarchy is not None:
        hierarchy.apply(lambda t: t.record_stream(main) or t)


class HierarchyAhead:
    """Iterate ``loader`` (batches with ``pos`` and ``ptr``: ``Points``, or PyG's) as device batches that carry their
    ``hierarchy``, each made by a background thread on a side CUDA stream while the previous one trains
    (module docstring); ``len`` is the loader's."""

    def __init__(self, loader: Iterable, spec: HierarchySpec, device: torch.device, depth: int = 1):
        self.loader, self.spec, self.device, self.depth = loader, spec, with_index(device), depth

    def __len__(self) -> int:
        return len(self.loader)

    def _produce(self) -> Iterator[tuple[object, torch.cuda.Event | None]]:
        cuda = self.device.type == "cuda"
        for batch in self.loader:
            offsets = batch.ptr[1:].tolist()               # on the host: no wait for the device
            copied, hierarchy, event = copy_and_build(lambda b=batch: b.to(self.device, non_blocking=cuda),
                                                      lambda b: b.pos, self.spec, offsets, self.device)
            copied.hierarchy = hierarchy
            yield copied, event

    def __iter__(self) -> Iterator[object]:
        with Prefetch(self._produce(), depth=self.depth, name="hierarchy beside the step") as ready:
            for batch, event in ready:
                if event is not None:
                    wait_for_side_stream(event, [v for _, v in batch if torch.is_tensor(v)], batch.hierarchy,
                                         self.device)
                yield batch
