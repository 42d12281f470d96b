"""Where a batch's point hierarchy (FPS, kNN, 3-NN: the model's ``hierarchy_spec``) is built, for training,
evaluation and predict alike: one decision (:func:`hierarchy_place`), one log line (:meth:`HierarchyPlace.line`).

=========  ===============================================================================================
place      where
=========  ===============================================================================================
``loader`` on the host with the CPU libraries, where the batch is made: training's loader workers
           (``build.AttachHierarchy``), evaluation's thread that cuts the pieces (``vote_batches.stack``)
``beside`` on the CUDA device, on a second stream one batch ahead, while the step runs
           (:mod:`pointgeope.engine.ahead`)
``model``  in the forward, on its device (``PointTransformerSeg.forward``: no hierarchy given)
``none``   nowhere: ``model.backbone: ptv3`` serializes and pools inside its forward, with no PTv1 hierarchy
=========  ===============================================================================================

``data.hierarchy`` asks for one: ``loader``, ``beside`` (on a device without CUDA: ``model``; ``device``,
its former name, still means it, with a note in the log line), or ``auto``:

- training: ``beside`` on CUDA when the device's default FPS and kNN are both :data:`DEVICE_KERNELS` (the
  Triton kernels) and, given the model's ``spec``, they ran there (a hierarchy of two small clouds built
  once: a kernel that fails falls back, and training then takes the loader rather than a slow in-model
  path); else ``loader`` (the CPU, or a GPU whose FPS would go through the host);
- evaluation and predict: no worker processes cut the pieces, one thread does: ``beside`` on CUDA (the
  device's kernels, whatever they are); elsewhere ``loader`` when that thread runs beside the forward
  (:func:`pipelined`), else ``model`` (pieces and forwards take turns; the same CPU libraries either way).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from pointgeope.engine.config import Config
from pointgeope.model.ops import backends

__all__ = ["HierarchyPlace", "DEVICE_KERNELS", "hierarchy_place", "pipelined", "device_kernels_run"]

DEVICE_KERNELS = ("triton",)   # point-op backends fast enough on the device to build the hierarchy per step
FORMER = {"device": "beside"}  # data.hierarchy values renamed, still accepted


@dataclass(frozen=True)
class HierarchyPlace:
    """``where`` (``"loader"``, ``"beside"``, ``"model"``, ``"none"``, module docstring) the hierarchy of the batches on
    ``device`` is built, ``why`` (``data.hierarchy``, or the reason of ``auto``)."""

    where: str
    why: str
    device: torch.device

    def line(self) -> str:
        """The log line of the place, the same for the three commands."""
        where = {"loader": "on the host, where the batches are made (CPU libraries)",
                 "beside": f"beside the step on {self.device} (a second stream)",
                 "model": f"by the model on {self.device}"}.get(self.where)
        if where is None:
            return f"point hierarchy: none ({self.why})"
        return f"point hierarchy: built {where} ({self.why})"


def hierarchy_place(cfg: Config, device: torch.device, spec=None, evaluation: bool = False) -> HierarchyPlace:
    """Where the hierarchy of the batches on ``device`` is built (module docstring): for training, or with
    ``evaluation`` for evaluate and predict; ``spec``: the model's, to try the device's kernels (training)."""
    asked = cfg.data.hierarchy
    if cfg.model.backbone == "ptv3":
        return HierarchyPlace("none", "model.backbone=ptv3 builds its serialization, pooling and sparse "
                                      "convolution's neighbours in the forward", device)
    if asked != "auto":
        wanted = FORMER.get(asked, asked)
        where = "model" if wanted == "beside" and device.type != "cuda" else wanted
        note = f"; '{asked}' is the former name of '{wanted}', which it still means" if asked in FORMER else ""
        return HierarchyPlace(where, f"data.hierarchy={asked}{note}", device)
    if evaluation:
        if device.type == "cuda":
            return HierarchyPlace("beside", "data.hierarchy=auto: evaluation on CUDA", device)
        if pipelined(device):
            return HierarchyPlace("loader", "data.hierarchy=auto: a core is free for the thread that cuts the "
                                            "pieces", device)
        return HierarchyPlace("model", "data.hierarchy=auto: torch's threads take every core", device)
    k = max(cfg.model.neighbours, default=1)     # the hierarchy's widest kNN (a k past Triton's goes elsewhere)
    fps, knn = backends.fps_backend(device), backends.knn_backend(device, k)
    if device.type == "cpu" or fps not in DEVICE_KERNELS or knn not in DEVICE_KERNELS:
        return HierarchyPlace("loader", f"data.hierarchy=auto: the {device.type} defaults fps={fps}, knn={knn} "
                                        "are not device kernels", device)
    if spec is not None and not device_kernels_run(spec, device):
        return HierarchyPlace("loader", f"data.hierarchy=auto: the {device.type} point kernels failed here and "
                                        f"fell back (fps={backends.fps_backend(device)}, "
                                        f"knn={backends.knn_backend(device, k)})", device)
    where = "beside" if device.type == "cuda" else "model"
    return HierarchyPlace(where, f"data.hierarchy=auto: the {device.type} kernels fps={fps}, knn={knn}", device)


def device_kernels_run(spec, device: torch.device, points: int = 4096) -> bool:
    """Build the hierarchy of two small random clouds (``points`` in all) with ``spec`` on ``device``;
    whether the default FPS and kNN backends there are still device kernels afterwards (none fell back)."""
    g = torch.Generator().manual_seed(0)
    coord = (torch.rand(points, 3, generator=g) * 4).to(device)
    spec(coord, [points // 2, points])
    return backends.fps_backend(device) in DEVICE_KERNELS and backends.knn_backend(device) in DEVICE_KERNELS


def pipelined(device: torch.device) -> bool:
    """Whether evaluation's background thread makes the pieces while the forward runs: always beside an
    accelerator; on the CPU only when torch leaves a core free (its OpenMP threads wait for each other at
    every parallel region, so a thread that takes one of their cores can stall the forward); otherwise
    pieces and forwards take turns. ``bench/results/bench_evaluate_cpu_*.json``: at 1 thread on 2 cores the
    thread ran the bench room's test in 0.67x the time; at 2 threads the variants were within the noise of
    a shared machine."""
    if device.type != "cpu":
        return True
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return torch.get_num_threads() < cores
