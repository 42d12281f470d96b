"""Which implementation runs each point op on each device, chosen from measurements.

Measured on the shared 2-core CPU at 80k points (torch-cluster figures from an earlier build of it;
``bench/bench_model.py`` re-measures the others, one thread, CPU seconds, in ``bench_model.json``):

- kNN, k = 8, of every point of an 80k crop: ``numba`` (``kd_knn``, the definition's ties directly) 0.060 s with its
  tree, ``pykdtree`` with the tie rule's re-ranking (``knn_ties``) 0.076 s (one thread, this machine under load; a
  whole CPU hierarchy 0.85x, ``bench/results/bench_hierarchy_cpu_kd_knn_1thread.json``).
- kNN, k = 16: ``pykdtree`` 0.14-0.39 s, ``scipy`` cKDTree 0.20-0.82 s (``workers=-1`` does not help on
  2 cores), torch-cluster 0.36 s, pure torch (chunked brute force, quadratic) about 60 s.
- FPS, 80k -> 20k: ``numba`` (``bucket_fps``, a bucket tree) 0.05-0.08 s at one thread and at two on the
  shared machine, 0.73-0.95x ``fpsample``'s bucket FPS, which starts elsewhere
  (``bench/results/bench_fps.json``); pure torch (iterative, one small step per sample) about 6 s. Every FPS
  backend gives the same sequence (``fps.FPS_RULE``).

So CPU tensors go to ``numba`` for both ops (the kNN falling back to ``pykdtree``, ``scipy``, pure torch, the FPS
to pure torch, when missing).
CUDA tensors go to the ``triton`` kernels (``triton_knn``, ``triton_fps``: exact, no build step; Triton ships
with CUDA builds of torch) where :mod:`pointgeope.model.kernels` says Triton runs (``POINTGEOPE_KERNELS``; a
kernel that failed on this device is off, and its op takes the next backend), else kNN to torch-cluster when
it is installed, else to pure torch on the device (one matrix product per chunk of queries), and FPS
goes to ``numba`` on the host: the pure-torch FPS is a Python loop of one small step per sample
(26,600 steps of ~7 kernel launches for the stages of one 80k-point crop), which would set a GPU's step
time, while copying the points to the host and back costs milliseconds. ``bench/gpu_check.py`` and
``bench/bench_hierarchy.py`` time them on a GPU. ``POINTGEOPE_KERNELS=triton`` makes Triton the default on CPU
tensors too under ``TRITON_INTERPRET=1`` (Triton's interpreter, how the tests check the kernels). Every op
also accepts an explicit ``backend`` (an explicit ``"triton"`` that fails raises, saying why: it is asked
for to be measured or compared, :meth:`pointgeope.model.kernels.Kernel.explicit`).

The Triton kNN takes ``k <= TRITON_KNN_MAX_K`` (64): its ``(BLOCK_Q, next_power_of_2(k))`` top-k of keys sits in
registers, and ``bench/triton_compile_check.py`` compiles it without a spill up to there; past it the compile
grows to minutes and the keys spill. A larger ``k`` goes to the next default backend (as where the kernel is
off); an explicit ``backend="triton"`` with a larger ``k`` is refused in one line.
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import torch

from pointgeope.model import kernels

__all__ = ["KNN_BACKENDS", "FPS_BACKENDS", "TRITON_KNN_MAX_K", "OpsBackends", "available", "knn_backend", "fps_backend",
           "resolve", "summary"]

KNN_BACKENDS = ("numba", "pykdtree", "scipy", "torch", "cluster", "triton")
FPS_BACKENDS = ("numba", "torch", "triton")
_MODULES = {"pykdtree": "pykdtree", "scipy": "scipy", "numba": "numba", "cluster": "torch_cluster",
            "torch": "torch", "triton": "triton"}
_CPU_ONLY = {"pykdtree", "scipy", "numba"}
# The largest k of the Triton kNN (module docstring): bench/triton_compile_check.py's largest kNN case, no spill
# on sm_80 and sm_90 (Triton 3.9: 158-210 registers at k = 16..64, 26 s to compile k = 64 for sm_90 on this
# 2-core machine); k = 128 had not compiled for sm_90 after 400 s, k = 256 neither.
TRITON_KNN_MAX_K = 64


@dataclass(frozen=True)
class OpsBackends:
    """Backends of the point ops (``None``: the device's measured default, see ``knn_backend``, ``fps_backend``)."""

    knn: str | None = None
    fps: str | None = None


# Looked up once, at import (without importing the packages): `torch.compile` reads a module's dict as a constant,
# while under torch 2.11 it broke the graph at `importlib.util.find_spec` behind a cached function, at every layer
_FOUND = {backend: importlib.util.find_spec(module) is not None for backend, module in _MODULES.items()
          if backend != "triton"}


def available(backend: str) -> bool:
    """Whether the package behind ``backend`` is installed (found without importing it, when this module is
    imported; ``triton``: it imports, as a broken install would only fail at the first kernel)."""
    if backend == "triton":
        return kernels.triton_imports()
    return _FOUND[backend]


def knn_backend(device: torch.device, k: int = 1) -> str:
    """The kNN backend used by default for tensors on ``device`` and ``k`` neighbours (Triton for ``k <=``
    :data:`TRITON_KNN_MAX_K`)."""
    if k <= TRITON_KNN_MAX_K and kernels.use_triton("knn", device):
        return "triton"
    if device.type == "cpu":
        for name in ("numba", "pykdtree", "scipy"):
            if available(name):
                return name
        return "torch"
    return "cluster" if available("cluster") else "torch"


def fps_backend(device: torch.device) -> str:
    """The FPS backend used by default for tensors on ``device`` (``numba`` runs on the host)."""
    if kernels.use_triton("fps", device):
        return "triton"
    return "numba" if available("numba") else "torch"


def resolve(backend: str | None, choices: tuple[str, ...], device: torch.device, kind: str, k: int = 1) -> str:
    """Check an explicit backend (or pick the default one when ``None``); ``k``: the kNN's neighbours."""
    if backend is None:
        return knn_backend(device, k) if kind == "knn" else fps_backend(device)
    if backend not in choices:
        raise ValueError(f"expected a {kind} backend in {choices} (or None for the default), got {backend!r}")
    if not available(backend):
        raise ValueError(f"{kind} backend {backend!r} needs the package {_MODULES[backend]!r}, which is not installed")
    if backend == "triton":
        kernels.require_runs_on(device, f"{kind} backend 'triton'")       # the one interpreter rule
        if kind == "knn" and k > TRITON_KNN_MAX_K:
            raise kernels.KernelArgumentError(
                f"knn backend 'triton' takes k <= {TRITON_KNN_MAX_K} (its top-k sits in registers), got k={k}: "
                "pass backend=None (a larger k takes the next default backend) or backend='torch'")
    return backend


def summary(device: torch.device | str) -> str:
    """One line naming the active backends on ``device``, for ``pointgeope info``."""
    device = torch.device(device)

    def name(backend: str) -> str:
        return f"{backend} (on the host)" if device.type != "cpu" and backend in _CPU_ONLY else backend

    return (f"{device.type}: knn={name(knn_backend(device))}, fps={name(fps_backend(device))}, "
            f"interpolation=3-NN via knn={name(knn_backend(device))}")
