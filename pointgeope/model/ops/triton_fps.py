"""Exact farthest point sampling on the GPU in Triton: each cloud's whole loop in one program.

The result (``fps`` backend ``"triton"``) is the sequence of the ``torch`` backend, bit for bit on float32
coordinates: from ``c_0 = 0`` (the cloud's first point), with ``dist_j`` the float32 squared distance of
point ``j`` to its nearest chosen sample,

    dist_j <- min(dist_j, ((x_j - x_c)^2 + (y_j - y_c)^2) + (z_j - z_c)^2)     (no fused multiply-add)
    c_{s+1} = the smallest j with dist_j = max_l dist_l

(``torch.argmax`` returns the first maximal index, so duplicates and exact ties resolve the same way).
Coordinates are converted to float32 first, as every backend does (``fps.FPS_RULE``).

One program per cloud, all clouds of a batch in parallel, one launch for the whole sampling. Two kernels:

- ``stream``: a step streams the cloud in chunks of ``BLOCK`` points: it updates ``dist`` (a global
  buffer, each slot read and written by the same thread) and a per-lane running maximum with its first
  index, then reduces the lanes once: the max, then the smallest index holding it. Reads every point
  at every step.
- ``rounds`` (the default, ``triton_fps_rounds``): the cloud sorted in Morton order and cut into blocks with
  bounding boxes; exact picks several at a time from a chunk of the blocks with the largest distances, in
  registers; the fewest dependent steps. (A former ``pruned`` kernel, one sample a step over the blocks a
  box test keeps, was as fast on an H100 at 32 chunk blocks and is gone: ``git log -S _fps_pruned_kernel``.)

Loops bounded by values loaded from memory are ``while`` loops: Triton 3.6's interpreter (with numpy >= 2.4)
cannot take such a bound in ``range``.
"""
from __future__ import annotations

import torch
import triton
import triton.language as tl
from torch import Tensor

from pointgeope.model.kernels import launch_device
from pointgeope.model.ops.triton_fps_rounds import BLOCK_POINTS, fps_rounds
from pointgeope.model.ops.triton_geometry import squared_distance

__all__ = ["fps_triton", "METHODS", "METHOD"]

STREAM_BLOCK = 4096       # points per chunk of the stream kernel, at most
METHODS = ("rounds", "stream")
METHOD = "rounds"         # the default up to MAX_BLOCKS blocks a cloud
MAX_BLOCKS = 2048         # larger clouds (131k points at 64 a block) take the stream kernel: the rounds kernel
                          # holds a lane per block in registers and is checked without spills up to 2048

_NONE = tl.constexpr(1 << 62)  # larger than every index


@triton.jit
def _fps_kernel(p_ptr, plane, dist_ptr, start_ptr, size_ptr, kept_ptr, out_start_ptr, out_ptr,
                BLOCK: tl.constexpr):
    cloud = tl.program_id(0)
    start = tl.load(start_ptr + cloud)                     # int64: first row of the cloud
    n = tl.load(size_ptr + cloud)
    m = tl.load(kept_ptr + cloud)
    out = out_ptr + tl.load(out_start_ptr + cloud)
    lane = tl.arange(0, BLOCK)
    last = start
    tl.store(out, last)
    s = m * 0 + 1                                          # while loops: bounds loaded from memory (module doc)
    while s < m:
        cx = tl.load(p_ptr + last)
        cy = tl.load(p_ptr + plane + last)
        cz = tl.load(p_ptr + 2 * plane + last)
        run_d = tl.full((BLOCK,), -1.0, tl.float32)        # below every distance: padding never wins
        run_j = tl.zeros((BLOCK,), tl.int64)
        c0 = n * 0
        while c0 < n:
            j = c0 + lane
            ok = j < n
            r = start + j
            dx = tl.load(p_ptr + r, mask=ok, other=0.0) - cx
            dy = tl.load(p_ptr + plane + r, mask=ok, other=0.0) - cy
            dz = tl.load(p_ptr + 2 * plane + r, mask=ok, other=0.0) - cz
            d = tl.minimum(tl.load(dist_ptr + r, mask=ok, other=-1.0), squared_distance(dx, dy, dz))
            tl.store(dist_ptr + r, d, mask=ok)
            up = ok & (d > run_d)                          # strict: an earlier chunk keeps its tie
            run_d = tl.where(up, d, run_d)
            run_j = tl.where(up, j, run_j)
            c0 += BLOCK
        best = tl.max(run_d, 0)
        last = start + tl.min(tl.where(run_d == best, run_j, _NONE), 0)
        tl.store(out + s, last)
        s += 1


def _fps_stream(planes: Tensor, sizes: list[int], kept: list[int], out: Tensor) -> None:
    device = planes.device
    sizes_t = torch.tensor(sizes, dtype=torch.long, device=device)
    kept_t = torch.tensor(kept, dtype=torch.long, device=device)
    starts = torch.cumsum(sizes_t, 0) - sizes_t
    out_starts = torch.cumsum(kept_t, 0) - kept_t
    dist = torch.full((planes.shape[1],), torch.inf, dtype=torch.float32, device=device)
    block = min(STREAM_BLOCK, triton.next_power_of_2(max(128, max(sizes))))
    _fps_kernel[(len(sizes),)](planes, planes.shape[1], dist, starts, sizes_t, kept_t, out_starts, out,
                               BLOCK=block, num_warps=16 if block >= 4096 else 4, num_stages=1,
                               enable_fp_fusion=False)


def fps_triton(points: Tensor, sizes: list[int], kept: list[int], method: str | None = None) -> Tensor:
    """``(sum(kept),)`` int64 global rows: the first ``kept[b]`` FPS samples of every cloud, cloud by cloud,
    with the ``"rounds"`` (``triton_fps_rounds``) or ``"stream"`` kernel (the same result).
    ``None``: :data:`METHOD`, unless a cloud has more than :data:`MAX_BLOCKS` blocks (its block maxima would
    no longer fit in registers): then ``stream``."""
    if method is None:
        method = METHOD if max(sizes) <= MAX_BLOCKS * BLOCK_POINTS else "stream"
    if method not in METHODS:
        raise ValueError(f"expected method in {METHODS} or None, got {method!r}")
    points = points.detach().to(torch.float32).contiguous()
    planes = points.T.contiguous()                                        # (3, N): x | y | z
    out = torch.empty(sum(kept), dtype=torch.long, device=points.device)
    with launch_device(points.device):
        if method == "stream":
            _fps_stream(planes, sizes, kept, out)
        else:
            fps_rounds(points, planes, sizes, kept, out)
    return out
