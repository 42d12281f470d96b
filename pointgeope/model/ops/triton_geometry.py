"""The geometric rules the Triton point kernels share (``triton_fps``, ``triton_fps_rounds``, ``triton_knn``),
each written once as a ``triton.jit`` function that the kernels inline.

- the squared distance of the FPS rule (``fps.FPS_RULE``) and of the kNN: ``((dx^2 + dy^2) + dz^2)`` in
  float32, one rounding per operation (the kernels are launched without fused multiply-add);
- the squared distance from a point to an axis-aligned box ``[lo, hi]``: the same expression of the gaps
  ``g_a = max(lo_a - p_a, p_a - hi_a, 0)``, so with the same monotone rounding it is never above the
  distance to a point inside the box (a box farther than a bound holds no point nearer than it);
- the packed key of a distance and a row: ``bits(d) << 32 | low`` (int64); the float32 bits of a
  non-negative distance order like the distance, so comparing keys compares ``(d, low)``. ``low`` is the
  row in the cloud for the kNN (nearest first, then the smaller row) and ``2^31 - 1 - row`` for the FPS
  (farthest first, then the smaller row).

(``bucket_fps``, the CPU's numba FPS, writes the box distance once more in numba: the same expression.)
"""
import triton
import triton.language as tl


@triton.jit
def squared_distance(dx, dy, dz):
    """``((dx^2 + dy^2) + dz^2)``: the distance of the FPS and kNN rules, from the coordinate differences."""
    return (dx * dx + dy * dy) + dz * dz


@triton.jit
def box_squared_distance(lx, ly, lz, hx, hy, hz, px, py, pz):
    """Squared distance from ``p`` to the box ``[l, h]`` (module docstring); operands broadcast."""
    gx = tl.maximum(tl.maximum(lx - px, px - hx), 0.0)
    gy = tl.maximum(tl.maximum(ly - py, py - hy), 0.0)
    gz = tl.maximum(tl.maximum(lz - pz, pz - hz), 0.0)
    return squared_distance(gx, gy, gz)


@triton.jit
def distance_key(d, low):
    """``bits(d) << 32 | low`` (int64) of a non-negative float32 distance ``d`` and ``0 <= low < 2^32``."""
    return (d.to(tl.int32, bitcast=True).to(tl.int64) << 32) | low


@triton.jit
def key_distance(key):
    """The float32 distance of a :func:`distance_key`."""
    return (key >> 32).to(tl.int32).to(tl.float32, bitcast=True)
