"""The pinhole camera that frames a room: looking into it from above at an angle, the whole room in view.

Conventions (those of Open3D's ``PinholeCameraParameters`` and OpenCV): the extrinsic ``E`` (4, 4) maps
world points to camera coordinates, ``[x y z 1]^T = E [X Y Z 1]^T``, with the camera axes::

    x: right    y: down    z: forward (depth)

and a point projects to the pixel (column ``u``, row ``v``; pixel centres at integers, row 0 at the top)::

    u = fx * x / z + cx        v = fy * y / z + cy        cx = (W - 1) / 2,  cy = (H - 1) / 2,  fx = fy

``fy = (H / 2) / tan(fov / 2)`` for the vertical field of view ``fov``: the same frustum as Open3D's
viewer, which accepts these parameters as they are (it needs the principal point at the image centre).

The viewing direction is given by the elevation ``e`` (angle above the horizontal plane) and the azimuth
``a`` (angle of the camera's horizontal position around the room, counter-clockwise from +X)::

    eye = centre + distance * (cos e cos a, cos e sin a, sin e)

``centre`` starts at the centre of the bounding box and is then moved across the line of sight until the
points' image is centred (as much room left as right, above as below), and ``distance`` is the smallest
at which every point projects inside the image, leaving ``margin`` (a fraction of each half-size) free.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# The image sides (pixels) the renderer can make: OpenGL's viewport and renderbuffer limit of Mesa's
# llvmpipe (the headless software renderer) and of common GPU drivers is 16384 (GL_MAX_VIEWPORT_DIMS),
# and X windows end at 32767 (a 100000-pixel window was an X BadValue, 20000 a segmentation fault).
MIN_IMAGE_SIDE, MAX_IMAGE_SIDE = 8, 16384

# The largest extent (metres) drawn as it is: Open3D hands the points and the camera to OpenGL in float32,
# and a wider scene (a stray point of a scan at 3e38 m) is drawn scaled down (:func:`drawing_frame`).
MAX_DRAWN_EXTENT = 2.0 ** 20


def drawing_frame(coord: np.ndarray) -> np.ndarray:
    """The points ``coord`` (N, 3) as the renderer draws them, float32 ``(N, 3)``: ``(p - c) / 2^k`` with ``c``
    the centre of their bounding box and ``2^k`` the smallest power of two (``k >= 0``) that brings their
    extent within :data:`MAX_DRAWN_EXTENT`. A similarity: the camera fitted to them frames the same image.
    Shifting keeps float32's precision where the points lie far from the origin; scaling keeps the camera's
    distance (about the extent) and every coordinate finite in float32 where the scene spans up to 3.4e38 m,
    where ``centre + direction`` was the centre itself in float64 (``look_at``: a ValueError)."""
    coord = np.asarray(coord, dtype=np.float64)
    lo, hi = coord.min(axis=0), coord.max(axis=0)
    extent = float((hi - lo).max())
    scale = 2.0 ** max(0, math.ceil(math.log2(extent / MAX_DRAWN_EXTENT))) if extent > MAX_DRAWN_EXTENT else 1.0
    return ((coord - (lo + hi) / 2.0) / scale).astype(np.float32)


@dataclass(frozen=True)
class Camera:
    """A pinhole camera: image size, focal length in pixels and the world-to-camera extrinsic (4, 4)."""

    width: int
    height: int
    focal: float
    extrinsic: np.ndarray

    @property
    def cx(self) -> float:
        return (self.width - 1) / 2.0

    @property
    def cy(self) -> float:
        return (self.height - 1) / 2.0

    @property
    def intrinsic(self) -> np.ndarray:
        """``K`` (3, 3) = [[f, 0, cx], [0, f, cy], [0, 0, 1]]."""
        return np.array([[self.focal, 0.0, self.cx], [0.0, self.focal, self.cy], [0.0, 0.0, 1.0]])

    @property
    def eye(self) -> np.ndarray:
        """Camera position in world coordinates: ``-R^T t``."""
        rot, t = self.extrinsic[:3, :3], self.extrinsic[:3, 3]
        return -rot.T @ t

    @property
    def forward(self) -> np.ndarray:
        """Unit viewing direction in world coordinates (the camera's +z axis)."""
        return self.extrinsic[2, :3].copy()

    def __repr__(self) -> str:
        eye = ", ".join(f"{v:.2f}" for v in self.eye)
        fwd = ", ".join(f"{v:.2f}" for v in self.forward)
        return f"Camera({self.width}x{self.height}, focal={self.focal:.1f}, eye=({eye}), forward=({fwd}))"


def look_at(eye, center, up=(0.0, 0.0, 1.0)) -> np.ndarray:
    """World-to-camera extrinsic ``(4, 4)`` of a camera at ``eye`` looking at ``center``.

    ``forward = normalize(center - eye)``, ``right = normalize(forward x up)``, ``down = forward x right``;
    the rows of ``R`` are (right, down, forward) and ``t = -R eye``.
    """
    eye = np.asarray(eye, dtype=np.float64)
    forward = np.asarray(center, dtype=np.float64) - eye
    norm = np.linalg.norm(forward)
    if norm == 0:
        raise ValueError("expected eye and center to differ, got the same point")
    forward /= norm
    right = np.cross(forward, np.asarray(up, dtype=np.float64))
    if np.linalg.norm(right) < 1e-9:
        raise ValueError(f"expected an up vector not parallel to the viewing direction, got up={tuple(up)}")
    right /= np.linalg.norm(right)
    down = np.cross(forward, right)
    ext = np.eye(4)
    ext[:3, :3] = np.stack([right, down, forward])
    ext[:3, 3] = -ext[:3, :3] @ eye
    return ext


def fit_camera(coord: np.ndarray, width: int, height: int, elevation: float = 45.0, azimuth: float = -60.0,
               fov: float = 60.0, margin: float = 0.05) -> Camera:
    """The camera looking at ``coord`` (N, 3) from ``elevation`` and ``azimuth`` (degrees), the points'
    image centred, at the smallest distance that keeps every point in the image (module docstring).

    With the camera looking at ``c + s_x right + s_y down`` from ``eye = that + d * dir``, a point ``p``
    with offsets ``(a, b, f) = (right, down, forward) . (p - c)`` has camera coordinates
    ``x = a - s_x``, ``y = b - s_y``, ``z = d + f``. It is inside with margin ``m`` when
    ``F |x| / z <= (1 - m) W / 2`` and ``F |y| / z <= (1 - m) H / 2``, i.e.
    ``d >= F |a - s_x| / ((1 - m) W / 2) - f`` (the same with ``b``, ``H``): ``d`` is the largest bound.
    The image is centred when ``max(x / z) = -min(x / z)``, solved for ``s_x`` by bisection (the sum is
    decreasing in ``s_x``), and the same for ``s_y``; ``d`` and ``s`` are refined alternately until ``d``
    settles (the last step is ``d``, so every point is inside whatever the centring achieved).

    All of these are extremes of linear or linear-fractional functions of ``(a, f)`` (or ``(b, f)``), so
    they are attained at the vertices of the 2-D convex hulls of those pairs, computed once.
    """
    coord = np.asarray(coord, dtype=np.float64)
    if coord.ndim != 2 or coord.shape[1] != 3 or coord.shape[0] == 0:
        raise ValueError(f"expected a non-empty coord of shape (N, 3), got {coord.shape}")
    if not (MIN_IMAGE_SIDE <= width <= MAX_IMAGE_SIDE and MIN_IMAGE_SIDE <= height <= MAX_IMAGE_SIDE):
        raise ValueError(f"expected an image of at least 8x8 pixels and at most {MAX_IMAGE_SIDE} a side, got "
                         f"{width}x{height}")
    if not 5.0 <= fov <= 90.0:
        raise ValueError(f"expected a field of view in [5, 90] degrees (Open3D's range), got {fov}")
    if not -90.0 <= elevation <= 90.0:
        raise ValueError(f"expected an elevation in [-90, 90] degrees, got {elevation}")
    if not 0.0 <= margin < 0.5:
        raise ValueError(f"expected a margin in [0, 0.5), got {margin}")
    lo, hi = coord.min(axis=0), coord.max(axis=0)
    center = (lo + hi) / 2.0
    e, a = math.radians(elevation), math.radians(azimuth)
    direction = np.array([math.cos(e) * math.cos(a), math.cos(e) * math.sin(a), math.sin(e)])
    # Looking straight down (or up) the world z axis cannot be the image's up: use the horizontal direction
    # the camera would face at a slightly lower elevation, the limit of the general case.
    up = (0.0, 0.0, 1.0) if abs(direction[2]) < 1.0 - 1e-9 else (-math.cos(a), -math.sin(a), 0.0)
    rot = look_at(center + direction, center, up)[:3, :3]            # rows: right, down, forward
    focal = (height / 2.0) / math.tan(math.radians(fov) / 2.0)
    local = (coord - center) @ rot.T                                 # (N, 3): offsets a, b, f
    across = [_hull_vertices(local[:, [k, 2]]) for k in (0, 1)]      # per image axis: (a, f), (b, f)
    halves = ((1.0 - margin) * width / 2.0, (1.0 - margin) * height / 2.0)
    shift = [0.0, 0.0]

    def fit_distance() -> float:
        bounds = [float(np.max(focal * np.abs(v[:, 0] - s) / half - v[:, 1]))
                  for v, s, half in zip(across, shift, halves, strict=True)]
        nearest = float(np.max([0.1 - v[:, 1].min() for v in across]))  # every point 10 cm in front
        return max(*bounds, nearest, 0.1)

    distance = fit_distance()
    for _ in range(100):  # a fixed point; converges geometrically (a few dozen rounds at most)
        shift = [_centring_shift(v[:, 0], distance + v[:, 1]) for v in across]
        previous, distance = distance, fit_distance()
        if abs(previous - distance) <= 1e-9 * distance:
            break
    target = center + shift[0] * rot[0] + shift[1] * rot[1]
    return Camera(width=int(width), height=int(height), focal=float(focal),
                  extrinsic=look_at(target + distance * direction, target, up))


def _hull_vertices(points: np.ndarray) -> np.ndarray:
    """The vertices of the convex hull of 2-D ``points`` (all points when few, or when degenerate)."""
    if points.shape[0] <= 64:
        return points
    from scipy.spatial import ConvexHull, QhullError

    try:
        return points[ConvexHull(points).vertices]
    except QhullError:  # all on a line (e.g. a flat floor seen from the top): no 2-D hull
        return points


def _centring_shift(offset: np.ndarray, depth: np.ndarray, iterations: int = 60) -> float:
    """``s`` with ``max((offset - s) / depth) = -min((offset - s) / depth)`` (``depth > 0``), by bisection."""
    lo, hi = float(offset.min()), float(offset.max())
    for _ in range(iterations):
        s = (lo + hi) / 2.0
        ratio = (offset - s) / depth
        if ratio.max() + ratio.min() > 0:
            lo = s
        else:
            hi = s
    return (lo + hi) / 2.0


def project(camera: Camera, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pixel coordinates ``(N, 2)`` (``u`` column, ``v`` row; float) and depth ``z`` ``(N,)`` of world points."""
    points = np.asarray(points, dtype=np.float64)
    if points.ndim != 2 or points.shape[1] != 3:
        raise ValueError(f"expected points of shape (N, 3), got {points.shape}")
    cam = points @ camera.extrinsic[:3, :3].T + camera.extrinsic[:3, 3]
    with np.errstate(divide="ignore", invalid="ignore"):
        uv = camera.focal * cam[:, :2] / cam[:, 2:3] + np.array([camera.cx, camera.cy])
    return uv, cam[:, 2]
