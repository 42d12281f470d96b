"""Batches on the accelerator with their point hierarchy built one batch ahead, beside the step.

While the GPU runs the step of batch ``i``, a background thread (:class:`~pointgeope.engine.prefetch.Prefetch`)
copies batch ``i + 1`` to the device and builds its point hierarchy (FPS, kNN, 3-NN: the model's
``hierarchy_spec``, on the device's kernels) on a second CUDA stream. Its coordinates are known as soon as
the loader hands it over, so a step takes the larger of network and hierarchy rather than their sum::

    side stream (thread):  copy + hierarchy(i+1) | copy + hierarchy(i+2) | ...
    main stream:           step(i)               | step(i+1)             | ...

The stream rules that make it safe: the thread records an event after a batch's work and the consumer's
stream waits for it (a wait on the device, not the host); every tensor made on the side stream is marked
as used by the consumer's stream (``record_stream``), so the caching allocator does not give its memory to
the side stream again while the step still reads it. The thread passes host offsets to the hierarchy, so
it never waits for the device to learn the clouds' sizes. Training uses it on CUDA only: on the CPU the
loader's workers build the hierarchy (``data.hierarchy: loader``) or the model does (``device``), as before. ``evaluate`` and
``predict`` do the same for their batches of test pieces (:func:`beside`, :func:`hand_over`, from the
thread that cuts them).
On a CPU device it runs without streams (a thread making the next batch's hierarchy), which is how the
tests check that it hands over the same batches and hierarchies in the same order.
"""
from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Iterator

import torch
from torch import Tensor

from pointgeope.engine.prefetch import Prefetch
from pointgeope.model.ops.hierarchy import HierarchySpec, PointHierarchy

__all__ = ["HierarchyAhead", "record_on", "side_stream", "beside", "hand_over"]

_local = threading.local()


def record_on(hierarchy: PointHierarchy, stream: torch.cuda.Stream) -> None:
    """Mark every tensor of ``hierarchy`` as used by ``stream`` (``Tensor.record_stream``)."""
    hierarchy.apply(lambda t: t.record_stream(stream) or t)


def side_stream(device: torch.device) -> torch.cuda.Stream:
    """This thread's second CUDA stream on ``device`` (one per thread and device, made on first use)."""
    streams = getattr(_local, "streams", None)
    if streams is None:
        streams = _local.streams = {}
    if device.index is None:                               # "cuda": the current device of the thread that asked
        device = torch.device("cuda", torch.cuda.current_device())
    if device not in streams:
        torch.cuda.set_device(device)                      # this thread's current device
        streams[device] = torch.cuda.Stream(device)
    return streams[device]


def beside(tensors: list[Tensor], offsets: list[int], spec: HierarchySpec, device: torch.device
           ) -> tuple[list[Tensor], PointHierarchy, torch.cuda.Event]:
    """``tensors`` (host, pinned; the first the coordinates) copied to CUDA ``device`` and the hierarchy of
    the clouds ``offsets`` built from them, on this thread's side stream; the event that marks the end."""
    stream = side_stream(device)
    with torch.cuda.stream(stream):
        moved = [t.to(device, non_blocking=True) for t in tensors]
        hierarchy = spec(moved[0], offsets)
        event = torch.cuda.Event()
        event.record(stream)
    return moved, hierarchy, event


def hand_over(event: torch.cuda.Event, tensors: list[Tensor], hierarchy: PointHierarchy | None,
              device: torch.device) -> None:
    """The consumer's side of :func:`beside`: its stream waits for ``event`` (on the device), and the
    tensors are marked as used by it, so their memory is not reused before its work on them is done."""
    main = torch.cuda.current_stream(device)
    main.wait_event(event)
    for t in tensors:
        t.record_stream(main)
    if hierarchy is not None:
        record_on(hierarchy, main)


class HierarchyAhead:
    """Iterate ``loader`` (PyG batches with ``pos`` and ``ptr``) as device batches that carry their
    ``hierarchy``, each made by a background thread on a side CUDA stream while the previous one trains
    (module docstring); ``len`` is the loader's."""

    def __init__(self, loader: Iterable, spec: HierarchySpec, device: torch.device, depth: int = 1):
        if device.type == "cuda" and device.index is None:  # the thread's current device is not this one's
            device = torch.device("cuda", torch.cuda.current_device())
        self.loader, self.spec, self.device, self.depth = loader, spec, device, depth
        self.cuda = device.type == "cuda"

    def __len__(self) -> int:
        return len(self.loader)

    def _produce(self) -> Iterator[tuple[object, torch.cuda.Event | None]]:
        stream = side_stream(self.device) if self.cuda else None
        for batch in self.loader:
            offsets = batch.ptr[1:].tolist()               # on the host: no wait for the device
            with torch.cuda.stream(stream) if self.cuda else contextlib.nullcontext():
                batch = batch.to(self.device, non_blocking=self.cuda)
                batch.hierarchy = self.spec(batch.pos, offsets)
                event = torch.cuda.Event() if self.cuda else None
                if event is not None:
                    event.record(stream)
            yield batch, event

    def __iter__(self) -> Iterator[object]:
        with Prefetch(self._produce(), depth=self.depth, name="hierarchy beside the step") as ready:
            for batch, event in ready:
                if event is not None:
                    hand_over(event, [], batch.hierarchy, self.device)
                    main = torch.cuda.current_stream(self.device)
                    batch.apply(lambda t: t.record_stream(main) or t)
                yield batch
