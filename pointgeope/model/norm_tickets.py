"""The int32 tickets by which batch norm's reducing kernels (``triton_norm.statistics`` and ``grad_sums``) find,
per channel block, the last of their ``T`` programs to store its partial row, which then reduces the ``T``
partials in a fixed order (one launch where a second kernel did it; the result the same bits, whichever
program is last).

Each launch takes one ticket per program (an atomic add on its channel block's int32) and leaves them as it
found them: the last program sets its block's back to 0. So one zeroed buffer per device and stream, made once
(one fill launched, the first time or when more channel blocks come) and kept, serves every call: no fill per
call. Per stream: two norms at once on two streams of a device do not share a ticket; on one stream the
launches follow one another (so do the replays of the CUDA graphs of ``engine/graphs.py``, which share the
buffer of their one capture stream: the first graph's capture records its fill, replayed before the others).

**A buffer once made is never freed**: a captured CUDA graph keeps the address it was recorded with, and a
freed buffer's memory could be handed to another tensor (the graphs' shared pool) that a replay's tickets then
count from. So a launch that raises inside :func:`taken` (a compile failure; in the interpreter, a stop part way
that may leave tickets counted) gets its buffer zeroed in place, in its stream's order, and a buffer outgrown
stays referenced here (a few hundred bytes each).
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import Tensor

__all__ = ["taken"]

MIN_BLOCKS = 64                 # channel blocks of a new buffer: 64 x 64 = 4096 channels before it grows
_BUFFERS: dict[tuple[torch.device, int], Tensor] = {}
_OUTGROWN: list[Tensor] = []    # kept for the graphs that may hold their addresses (module docstring)


def _key(device: torch.device) -> tuple[torch.device, int]:
    """(device, stream): the CUDA device's current stream, the CPU's one (0)."""
    return device, torch.cuda.current_stream(device).stream_id if device.type == "cuda" else 0


@contextlib.contextmanager
def taken(device: torch.device, blocks: int) -> Iterator[Tensor]:
    """The zeroed int32 tickets (at least ``blocks``) of ``device``'s current stream, for the launch inside the
    block; if it raises, the buffer is zeroed in place (kept: module docstring) and the error goes on."""
    key = _key(device)
    buffer = _BUFFERS.get(key)
    if buffer is None or buffer.numel() < blocks:
        if buffer is not None:
            _OUTGROWN.append(buffer)
        buffer = _BUFFERS[key] = torch.zeros(max(blocks, MIN_BLOCKS), dtype=torch.int32, device=device)
    try:
        yield buffer
    except BaseException:
        buffer.zero_()
        raise
