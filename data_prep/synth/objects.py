"""Furniture and building parts of the synthetic rooms, each built in its own local frame.

Local frame of every builder here (metres)::

    z up, floor at z = 0
    x along the wall the object stands against (or along the object's width), from its left edge
    y away from that wall into the room (y = 0 is the wall plane, or the object's back)

Each builder returns the visible surfaces as :class:`~data_prep.synth.geometry.Patches` (faces that touch
the floor or the wall are left out, as a scanner never sees them) and, for solid objects, the local
axis-aligned box ``(2, 3)`` that hides the wall, floor and ceiling points behind or under it.
The room layout (``data_prep.synth.rooms``) places them with :func:`~data_prep.synth.geometry.place`.

Colours: :data:`BASE_COLOURS` gives each annotation class a mean RGB. Pairs that sit together in real
buildings are kept close on purpose (wall / column / board, ceiling / beam, door / table / bookcase) so
that a model has to use the geometry as well as the colour.
"""
from __future__ import annotations

import numpy as np

from data_prep.synth.geometry import Patches, box, concat, rect

# Mean colour per annotation class ("stairs" is the real dataset's extra class, mapped to clutter later);
# clutter draws a random colour per object instead.
BASE_COLOURS: dict[str, tuple[int, int, int]] = {
    "ceiling": (205, 203, 196), "floor": (125, 118, 108), "wall": (188, 184, 174),
    "beam": (197, 195, 186), "column": (180, 176, 166), "window": (150, 168, 188),
    "door": (150, 112, 76), "table": (168, 136, 98), "chair": (72, 72, 84),
    "sofa": (104, 84, 120), "bookcase": (138, 108, 80), "board": (206, 206, 199),
    "stairs": (132, 126, 116),
}
# Per-point colour noise (std of each channel): books make bookcases far more colourful than walls.
POINT_COLOUR_STD: dict[str, float] = {"bookcase": 28.0, "clutter": 14.0}
DEFAULT_POINT_COLOUR_STD = 9.0
OBJECT_COLOUR_STD = 10.0  # one draw per object: two chairs are never quite the same colour

TABLE_HEIGHT = 0.74
SEAT_HEIGHT = 0.45


def object_colours(name: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """Colours of the ``n`` points of one object of annotation class ``name``, uint8 ``(n, 3)``.

    mean = the class colour (clutter: a random colour) + one object-wide offset; then per-point noise.
    """
    if name == "clutter":
        mean = rng.uniform(40, 225, size=3)
    else:
        mean = np.asarray(BASE_COLOURS[name], float) + rng.normal(0, OBJECT_COLOUR_STD, size=3)
    std = POINT_COLOUR_STD.get(name, DEFAULT_POINT_COLOUR_STD)
    rgb = mean + rng.normal(0, std, size=(n, 3))
    return np.clip(np.rint(rgb), 0, 255).astype(np.uint8)


def table(width: float, depth: float, height: float = TABLE_HEIGHT) -> Patches:
    """A table ``[0, width] x [0, depth]``: a 4 cm top at ``height`` and four 5 cm square legs."""
    top = box([0, 0, height - 0.04], [width, depth, height])
    legs = [box([x, y, 0], [x + 0.05, y + 0.05, height - 0.04], skip=("-z", "+z"))
            for x in (0.03, width - 0.08) for y in (0.03, depth - 0.08)]
    return concat([top, *legs])


def chair() -> Patches:
    """A chair in ``[0, 0.46] x [0, 0.46]`` facing -y (its backrest at y = 0.42..0.46, up to 0.92 m)."""
    seat = box([0, 0, SEAT_HEIGHT - 0.05], [0.46, 0.46, SEAT_HEIGHT])
    back = box([0.02, 0.42, SEAT_HEIGHT], [0.44, 0.46, 0.92], skip=("-z",))
    legs = [box([x, y, 0], [x + 0.03, y + 0.03, SEAT_HEIGHT - 0.05], skip=("-z", "+z"))
            for x in (0.02, 0.41) for y in (0.02, 0.41)]
    return concat([seat, back, *legs])


def sofa(width: float, depth: float = 0.85) -> tuple[Patches, np.ndarray]:
    """A sofa against the wall: a 0.42 m base, a backrest to 0.85 m at the wall, two arms to 0.62 m."""
    base = box([0, 0, 0], [width, depth, 0.42], skip=("-z", "-y"))
    back = box([0, 0, 0.42], [width, 0.22, 0.85], skip=("-z", "-y"))
    arms = [box([x, 0.22, 0.42], [x + 0.16, depth, 0.62], skip=("-z", "-y")) for x in (0, width - 0.16)]
    return concat([base, back, *arms]), np.array([[0, 0, 0], [width, depth, 0.85]])


def bookcase(width: float, height: float, depth: float = 0.36) -> tuple[Patches, np.ndarray]:
    """An open-front bookcase against the wall: sides, top, shelves every ~0.38 m, a row of books on each.

    Books are one box per shelf (25 cm deep, 18-24 cm high) so that the front looks filled, as in
    real bookcases; they belong to the bookcase class as in S3DIS.
    """
    t = 0.02
    parts = [box([0, 0, 0], [t, depth, height], skip=("-z", "-y")),
             box([width - t, 0, 0], [width, depth, height], skip=("-z", "-y")),
             box([0, 0, height - t], [width, depth, height], skip=("-y",)),
             rect([t, 0.005, 0], [width - 2 * t, 0, 0], [0, 0, height])]  # back panel
    shelves = np.arange(0.05, height - 0.3, 0.38)
    for i, z in enumerate(shelves):
        parts.append(box([t, 0, z], [width - t, depth, z + t], skip=("-y",)))
        book_h = 0.18 + 0.06 * ((i * 7) % 3) / 2
        parts.append(box([t + 0.02, 0.01, z + t], [width - t - 0.02, 0.26, z + t + book_h],
                         skip=("-z", "-y")))
    return concat(parts), np.array([[0, 0, 0], [width, depth, height]])


def door(width: float = 0.9, height: float = 2.05) -> tuple[Patches, np.ndarray]:
    """A closed door leaf 4 cm thick standing 2 cm out of the wall plane, with a handle; cuts the wall."""
    leaf = box([0, 0.02, 0], [width, 0.06, height], skip=("-z", "-y"))
    handle = box([width - 0.14, 0.06, 1.0], [width - 0.04, 0.09, 1.04])
    return concat([leaf, handle]), np.array([[0, -0.05, 0], [width, 0.09, height]])


def window(width: float, z0: float, z1: float) -> tuple[Patches, np.ndarray]:
    """A window from ``z0`` to ``z1``: a 5 cm frame 4 cm proud of the wall and a glass pane behind it."""
    f = 0.05
    frame = [box([0, 0, z0], [width, 0.04, z0 + f], skip=("-y",)),
             box([0, 0, z1 - f], [width, 0.04, z1], skip=("-y",)),
             box([0, 0, z0 + f], [f, 0.04, z1 - f], skip=("-y", "-z", "+z")),
             box([width - f, 0, z0 + f], [width, 0.04, z1 - f], skip=("-y", "-z", "+z")),
             box([width / 2 - 0.02, 0, z0 + f], [width / 2 + 0.02, 0.04, z1 - f], skip=("-y", "-z", "+z"))]
    pane = rect([f, 0.015, z0 + f], [width - 2 * f, 0, 0], [0, 0, z1 - z0 - 2 * f])
    return concat([*frame, pane]), np.array([[0, -0.05, z0], [width, 0.04, z1]])


def board(width: float, z0: float, z1: float) -> tuple[Patches, np.ndarray]:
    """A whiteboard 2 cm thick on the wall from ``z0`` to ``z1``, with a 4 cm pen tray; cuts the wall."""
    slab = box([0, 0, z0], [width, 0.02, z1], skip=("-y",))
    tray = box([0.1 * width, 0.02, z0 - 0.02], [0.9 * width, 0.07, z0])
    return concat([slab, tray]), np.array([[0, -0.05, z0 - 0.02], [width, 0.07, z1]])


def column(width: float, depth: float, height: float, corner: bool) -> tuple[Patches, np.ndarray]:
    """A column of ``width x depth`` from floor to ceiling against the wall (and the left wall if ``corner``)."""
    skip = ("-y", "-z", "+z", "-x") if corner else ("-y", "-z", "+z")
    return box([0, 0, 0], [width, depth, height], skip=skip), np.array([[0, 0, 0], [width, depth, height]])


def beam(length: float, width: float, depth: float, ceiling: float) -> tuple[Patches, np.ndarray]:
    """A beam under the ceiling along x, ``[0, length] x [0, width]``, ``depth`` deep; ends in the walls."""
    lo, hi = [0, 0, ceiling - depth], [length, width, ceiling]
    return box(lo, hi, skip=("+z", "-x", "+x")), np.array([lo, hi])


def clutter_box(size, z0: float = 0.0) -> Patches:
    """A small object (monitor, box, bin, lamp...) standing at height ``z0``: a box of ``size`` (3,)."""
    sx, sy, sz = size
    return box([0, 0, z0], [sx, sy, z0 + sz], skip=("-z",))


def stairs(width: float, steps: int, rise: float = 0.17, run: float = 0.28) -> tuple[Patches, np.ndarray]:
    """``steps`` steps climbing towards the wall at y = 0 (tread ``run``, riser ``rise``), ``width`` wide."""
    depth = steps * run
    parts = []
    for i in range(steps):
        y1 = depth - i * run   # front edge of step i (the first step is the farthest from the wall)
        z = (i + 1) * rise
        parts.append(rect([0, y1, z - rise], [width, 0, 0], [0, 0, rise]))  # riser
        parts.append(rect([0, y1 - run, z], [width, 0, 0], [0, run, 0]))     # tread
    return concat(parts), np.array([[0, 0, 0], [width, depth, steps * rise]])
