"""Memory a run would need, estimated before it allocates, against the memory there is.

The neighbourhoods of Point Transformer are the largest tensors of a training step: stage ``s`` of a
sample of ``n_0 = data.voxel_max`` points keeps ``n_s = ceil(n_0 / (strides[0] ... strides[s]))`` points,
and every attention block of the stage (``blocks[s]`` in the encoder, ``decoder_blocks[s]`` after the
transition-up) holds for backward at least one float32 tensor of ``n_s x min(k_s, n_s) x planes[s]``::

    bytes >= 4 * samples * sum_s  n_s * min(k_s, n_s) * planes[s] * (blocks[s] + decoder_blocks[s])

(a lower bound: each block holds several such tensors), so a step refused here could never run. It is what
``model.neighbours: [100000, ...]`` met: a step that grew past 3 GB and never ended its first epoch.
"""
from __future__ import annotations

import math
import os


def available_memory(device=None) -> int:
    """Bytes a new allocation can take: the free memory of a CUDA ``device``, else the host's
    ``MemAvailable`` (``/proc/meminfo``; the physical memory where there is none)."""
    if device is not None and getattr(device, "type", "cpu") == "cuda":
        import torch

        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def neighbour_bytes(model, points: int, samples: int) -> tuple[int, int]:
    """``(bytes, stage)``: the lower bound of the module docstring for ``samples`` samples of ``points``
    points each with the ``model`` config (``planes``, ``strides``, ``neighbours``, ``blocks``,
    ``decoder_blocks``), and the stage that needs the most."""
    total, largest, worst, n = 0, -1, 0, points
    for s, (width, stride, k) in enumerate(zip(model.planes, model.strides, model.neighbours, strict=True)):
        n = math.ceil(n / stride)
        layers = model.blocks[s] + (model.decoder_blocks[s] if s < len(model.decoder_blocks) else 0)
        stage = 4 * samples * n * min(k, n) * width * layers
        total += stage
        if stage > largest:
            largest, worst = stage, s
    return total, worst


def neighbour_problem(model, points: int | None, samples: int, device=None) -> str | None:
    """What is wrong with training ``model`` on ``samples`` samples of ``points`` points per step, or
    ``None``: a message when :func:`neighbour_bytes` exceeds :func:`available_memory` (nothing to check
    without a crop, ``points=None``: the samples are the rooms; nor for a model config without Point
    Transformer's stage lists)."""
    fields = ("planes", "strides", "neighbours", "blocks", "decoder_blocks")
    if points is None or not all(hasattr(model, f) for f in fields):  # another backbone: its own estimate
        return None
    need, stage = neighbour_bytes(model, points, samples)
    have = available_memory(device)
    if need <= have:
        return None
    from pointgeope.plural import counted

    return (f"model.neighbours {model.neighbours}: a training step of {counted(samples, 'sample')} of up to "
            f"{points:,} points (data.voxel_max) needs at least {need / 2**30:.3g} GiB for its neighbourhoods (points "
            f"x k x planes float32 per attention block; stage {stage} the most), more than the {have / 2**30:.3g} GiB "
            f"free on {device or 'this machine'}; lower model.neighbours, data.voxel_max or data.batch_size")
