"""The host hierarchy's and the training transforms' numba functions compiled once, in the main process, before
the loader's workers start.

``numba``'s FPS and kNN (``bucket_fps``, ``kd_knn``, ``knn_rows``) compile at their first call (``cache=True``
writes the machine code to numba's cache, ``NUMBA_CACHE_DIR`` or ``__pycache__``). With an empty cache each data
loader worker would compile them on its own (about 30 s a process, all at once on the same cores); built once
here instead, a forked worker inherits the compiled functions and a spawned one loads them from the cache.

The warm-up builds the hierarchy of two tiny clouds with the network's own ``spec`` on the host, in the dtype the
dataset gives (``pos`` float32), so the very signatures the workers call are the ones compiled: each cloud has
``prod(strides) * max(neighbours, UP_NEIGHBOURS)`` points, so that every stage keeps at least as many points as
its widest search (the same branches as a real batch). The tree kNN puts a query cloud of another cloud's
points in its Morton order from ``knn._ORDERED_QUERIES`` queries (``morton_order.cloud_order``), which clouds this
small never reach: that order is computed once on them directly. Nothing is done when neither op resolves to
``numba`` on the host (numba missing, or another backend asked for).

The training transforms call two numba functions of their own, whatever builds the hierarchy (on CUDA it is built
beside the step, and the workers make blocks only): the hue and saturation shift (``data.hsv``) and the radix sort
of the voxel keys (``radix``, through ``voxelize``). With an empty cache each worker compiled them at its first
sample (about 14 s and 2-4 s on the loaded test machine, every worker at once on the same cores);
:func:`warm_data_transforms` compiles them first (the hue shift only where the augmentation calls it).
"""
from __future__ import annotations

import math
import time

import numpy as np
import torch

from pointgeope.data.hsv import shift_hue_saturation
from pointgeope.data.transforms import HueSaturationTranslation
from pointgeope.model.ops.backends import FPS_BACKENDS, KNN_BACKENDS, resolve
from pointgeope.model.ops.hierarchy import UP_NEIGHBOURS
from pointgeope.morton_order import cloud_order
from pointgeope.radix import sort_nonnegative

__all__ = ["uses_numba", "warm_host_hierarchy", "warm_data_transforms"]

_HOST = torch.device("cpu")


def uses_numba(spec) -> bool:
    """Whether ``spec`` (a ``HierarchySpec``) built on the host runs a numba function (FPS or kNN)."""
    k = max(spec.neighbours, default=1)
    return "numba" in (resolve(spec.backends.fps, FPS_BACKENDS, _HOST, "fps"),
                       resolve(spec.backends.knn, KNN_BACKENDS, _HOST, "knn", k))


def warm_host_hierarchy(spec, clouds: int = 2) -> float | None:
    """Build ``spec``'s hierarchy of ``clouds`` tiny float32 clouds on the host (module docstring): the seconds it
    took (the compile, with an empty cache; milliseconds once compiled), or None when ``spec`` is None or uses
    no numba function on the host."""
    if spec is None or not uses_numba(spec):
        return None
    per_cloud = math.prod(spec.strides) * max((*spec.neighbours, UP_NEIGHBOURS))
    coord = torch.rand(clouds * per_cloud, 3, generator=torch.Generator().manual_seed(0))
    start = time.perf_counter()
    spec(coord, [per_cloud * (b + 1) for b in range(clouds)])
    cloud_order(coord.numpy())
    return time.perf_counter() - start


def warm_data_transforms(transform=None) -> float:
    """Run the training transforms' numba functions on tiny inputs of the dtypes a sample holds (``color`` float32
    ``(N, 3)``, voxel keys int64; module docstring): the seconds it took (the compile, with an empty cache). The hue
    shift only where the dataset's ``transform`` (a ``transforms.Compose``) holds a ``HueSaturationTranslation``
    (``data.augment: ptv1``; the other sets never call it), the voxel sort always (every dataset's grid sampling)."""
    start = time.perf_counter()
    if any(isinstance(t, HueSaturationTranslation) for t in getattr(transform, "transforms", [transform])):
        shift_hue_saturation(np.zeros((2, 3), np.float32), 0.0, 1.0)
    sort_nonnegative(np.array([1, 0], np.int64))
    return time.perf_counter() - start
