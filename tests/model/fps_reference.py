"""The farthest point sampling of ``pointgeope.model.ops.fps.FPS_RULE``, written from the rule in numpy: the one
definition the FPS tests of every backend compare with (test_bucket_fps.py, test_ops.py, test_hierarchy.py,
test_triton_ops.py)."""
from __future__ import annotations

import numpy as np


def reference_fps(cloud: np.ndarray, m: int) -> list[int]:
    """The first ``m`` samples: float32 coordinates, ``dist`` from +inf, float32 ``((dx*dx + dy*dy) + dz*dz)``
    one numpy operation (one rounding) at a time, the first sample row 0, then the smallest index of the max."""
    c = np.asarray(cloud).astype(np.float32)
    dist = np.full(len(c), np.inf, dtype=np.float32)
    chosen = [0]
    for _ in range(1, m):
        diff = c - c[chosen[-1]]
        dist = np.minimum(dist, (diff[:, 0] * diff[:, 0] + diff[:, 1] * diff[:, 1]) + diff[:, 2] * diff[:, 2])
        chosen.append(int(np.flatnonzero(dist == dist.max())[0]))
    return chosen
