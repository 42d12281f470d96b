"""Layouts of the synthetic rooms: offices, conference rooms and hallways furnished as in real buildings.

A room is the box ``[0, Lx] x [0, Ly] x [0, H]`` (shifted to its place in the area afterwards). Its walls
are numbered counter-clockwise seen from above, each with a local frame (x along the wall, y into the room)::

              wall 2 (y = Ly), runs -x
          +-----------------------------+
          |                             |
   wall 3 |                             | wall 1 (x = Lx), runs +y
   runs -y|                             |
          +-----------------------------+
        (0,0)   wall 0 (y = 0), runs +x

Things standing against a wall (doors, windows, boards, bookcases, sofas, columns, bins) claim an interval
along it, so they never overlap; tables stand in the middle with chairs around them, clutter sits on
tables and along the walls and hangs under the ceiling (lights), beams cross under the ceiling. An office
places one thing of every class first (the tests check that it holds all 13), so every area, whose first
room is an office, has all 13 classes.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from data_prep.synth import objects as obj
from data_prep.synth.geometry import Patches, place, place_box, rect, rotation_z

ROOM_KINDS = ("office", "conferenceRoom", "hallway")
STRUCTURE = ("ceiling", "floor", "wall")  # surfaces that solid objects hide


@dataclass
class Part:
    """One annotated object: its class (``stairs`` allowed), its surfaces and the box it hides, if solid.

    ``patches`` are in the room's frame; ``solid`` is float64 ``(2, 3)`` ``[min, max]`` or ``None``.
    """

    name: str
    patches: Patches
    solid: np.ndarray | None = None


@dataclass
class RoomLayout:
    """A furnished room: ``name`` like ``office_3``, ``kind`` in :data:`ROOM_KINDS`, box ``lo``/``hi`` (3,)."""

    name: str
    kind: str
    lo: np.ndarray
    hi: np.ndarray
    parts: list[Part] = field(default_factory=list)

    def shifted(self, offset) -> RoomLayout:
        """The same room moved by ``offset`` (3,), e.g. to its place in the area."""
        off = np.asarray(offset, float)
        parts = [Part(p.name, Patches(p.patches.origin + off, p.patches.u, p.patches.v),
                      None if p.solid is None else p.solid + off) for p in self.parts]
        return RoomLayout(self.name, self.kind, self.lo + off, self.hi + off, parts)


class Walls:
    """The four walls of a room box: their local frames and the intervals already taken along each."""

    def __init__(self, size: np.ndarray):
        lx, ly = float(size[0]), float(size[1])
        self.length = (lx, ly, lx, ly)
        # (quarter turns, position of the wall's start) per wall, see the module drawing.
        self.frames = ((0, (0, 0, 0)), (1, (lx, 0, 0)), (2, (lx, ly, 0)), (3, (0, ly, 0)))
        self.used: list[list[tuple[float, float]]] = [[] for _ in range(4)]

    def free(self, wall: int, a: float, b: float, gap: float) -> bool:
        """Whether ``[a, b]`` along ``wall`` is inside it and at least ``gap`` from every taken interval."""
        inside = a >= 0 and b <= self.length[wall]
        return inside and all(b + gap <= u or a >= v + gap for u, v in self.used[wall])

    def claim(self, wall: int, width: float, rng: np.random.Generator, gap: float = 0.1) -> float | None:
        """Take a free interval of ``width`` at a random place along ``wall``; its start, or ``None``."""
        top = self.length[wall] - width - gap
        if top < gap:
            return None
        tries = [float(s) for s in rng.uniform(gap, top, size=40)]
        tries += [gap] + [v + gap for _, v in sorted(self.used[wall])]  # then every leftmost free start
        for s in tries:
            if self.free(wall, s, s + width, gap):
                self.used[wall].append((s, s + width))
                return s
        return None

    def claim_any(self, walls, width: float, rng: np.random.Generator) -> tuple[int, float] | None:
        """:meth:`claim` on the first of ``walls`` (in the given order) that has room; ``(wall, start)``."""
        for wall in walls:
            s = self.claim(int(wall), width, rng)
            if s is not None:
                return int(wall), s
        return None

    def put(self, name: str, wall: int, s: float, patches: Patches, solid=None) -> Part:
        """A :class:`Part` from an object built in a wall's local frame, its left edge at ``s`` along it."""
        turns, start = self.frames[wall]
        shift = np.asarray(start, float) + rotation_z(turns) @ np.array([s, 0.0, 0.0])
        return Part(name, place(patches, turns, shift),
                    None if solid is None else place_box(solid[0], solid[1], turns, shift))


def _structure(size: np.ndarray) -> list[Part]:
    """Ceiling, floor and four walls (``wall_1..4`` in the order of :class:`Walls`) of the room box."""
    lx, ly, h = size
    walls = Walls(size)
    parts = [Part("ceiling", rect([0, 0, h], [lx, 0, 0], [0, ly, 0])),
             Part("floor", rect([0, 0, 0], [lx, 0, 0], [0, ly, 0]))]
    for k in range(4):
        parts.append(walls.put("wall", k, 0.0, rect([0, 0, 0], [walls.length[k], 0, 0], [0, 0, h])))
    return parts


def _order(rng: np.random.Generator, first=None) -> list[int]:
    """The four walls in a random order, ``first`` (a list of walls) tried before the others."""
    first = list(first or [])
    rest = [int(w) for w in rng.permutation(4) if int(w) not in first]
    return first + rest


def _corner_column(walls: Walls, wall: int, h: float, rng: np.random.Generator) -> Part | None:
    """A column in the corner where ``wall`` starts; reserves both walls' ends; ``None`` if taken."""
    w, d = rng.uniform(0.35, 0.6, size=2)
    prev = (wall - 1) % 4
    if not (walls.free(wall, 0, w, 0.05) and walls.free(prev, walls.length[prev] - d, walls.length[prev], 0.05)):
        return None
    walls.used[wall].append((0.0, w))
    walls.used[prev].append((walls.length[prev] - d, walls.length[prev]))
    return walls.put("column", wall, 0.0, *obj.column(w, d, h, corner=True))


def _beams(size: np.ndarray, count: int, rng: np.random.Generator, across: bool) -> list[Part]:
    """``count`` beams under the ceiling, evenly spread; ``across`` = running along y (else along x)."""
    lx, ly, h = size
    span, length = (lx, ly) if across else (ly, lx)
    parts = []
    for i in range(count):
        width, depth = rng.uniform(0.25, 0.4), rng.uniform(0.3, 0.5)
        pos = span * (i + 1) / (count + 1) + rng.uniform(-0.1, 0.1) * span / (count + 1) - width / 2
        patches, solid = obj.beam(length, width, depth, h)
        if across:  # local x -> world y; the local box [0, L] x [0, w] lands on x in [pos, pos + w]
            parts.append(Part("beam", place(patches, 1, (pos + width, 0, 0)),
                              place_box(solid[0], solid[1], 1, (pos + width, 0, 0))))
        else:
            parts.append(Part("beam", place(patches, 0, (0, pos, 0)), place_box(solid[0], solid[1], 0, (0, pos, 0))))
    return parts


def _ceiling_lights(size: np.ndarray, count: int, parts: list[Part], rng: np.random.Generator) -> list[Part]:
    """Up to ``count`` flat ceiling lights (clutter, as in S3DIS): 5 cm panels hung under the ceiling.

    A light goes where its footprint keeps 0.1 m from the walls and from the beams and columns among
    ``parts`` (at most 30 tries each).
    """
    lx, ly, h = size
    taken = [p.solid[:, :2] for p in parts if p.name in ("beam", "column")]  # (2, 2) footprints [min, max]
    parts = []
    for _ in range(count):
        a, b = (0.6, 0.6) if rng.random() < 0.5 else (1.2, 0.3)
        if rng.random() < 0.5:
            a, b = b, a
        for x, y in rng.uniform([0.1, 0.1], [max(0.11, lx - a - 0.1), max(0.11, ly - b - 0.1)], size=(30, 2)):
            foot = np.array([[x, y], [x + a, y + b]])
            if all(np.any(foot[1] + 0.1 <= t[0]) or np.any(foot[0] - 0.1 >= t[1]) for t in taken):
                lo, hi = [x, y, h - 0.05], [x + a, y + b, h]
                parts.append(Part("clutter", obj.clutter_box([a, b, 0.05], h - 0.05), np.array([lo, hi])))
                taken.append(foot)
                break
    return parts


def _table_with_chairs(centre, width: float, depth: float, chairs: dict[str, int],
                       rng: np.random.Generator, clutter: int) -> list[Part]:
    """A table centred at ``centre`` (x, y), chairs facing it, ``clutter`` small objects on its top.

    ``chairs`` maps a side (``"-y"``, ``"+y"``, ``"-x"``, ``"+x"``) to the number of chairs along it.
    """
    x0, y0 = centre[0] - width / 2, centre[1] - depth / 2
    parts = [Part("table", place(obj.table(width, depth), 0, (x0, y0, 0)))]
    # side -> (outward normal, quarter turns that map the chair's back (local +y) onto it, side length)
    sides = {"-y": ((0, -1), 2, width), "+y": ((0, 1), 0, width), "-x": ((-1, 0), 1, depth), "+x": ((1, 0), 3, depth)}
    for side, count in chairs.items():
        normal, turns, length = sides[side]
        n = np.array([*normal, 0.0])
        along = np.array([abs(normal[1]), abs(normal[0]), 0.0])  # the side's direction
        edge_start = np.array([x0, y0, 0.0]) + np.where(n > 0, [width, depth, 0], 0) * np.abs(n)
        for i in range(count):
            front = edge_start + along * length * (i + 0.5) / count + n * rng.uniform(0.02, 0.15)
            shift = front - rotation_z(turns) @ np.array([0.23, 0.0, 0.0])
            parts.append(Part("chair", place(obj.chair(), turns, shift)))
    for _ in range(clutter):
        size = rng.uniform([0.08, 0.08, 0.03], [0.5, 0.35, 0.4])
        cx = rng.uniform(x0 + 0.05, x0 + max(0.06, width - size[0] - 0.05))
        cy = rng.uniform(y0 + 0.05, y0 + max(0.06, depth - size[1] - 0.05))
        parts.append(Part("clutter", place(obj.clutter_box(size, obj.TABLE_HEIGHT), 0, (cx, cy, 0))))
    return parts


# Width range of each thing that stands against a wall, metres (a thing that does not fit at its drawn
# width is tried at 3/4 and 1/2 of it, never below the lower bound of the range).
WALL_WIDTHS = {"stairs": (1.1, 1.1), "door": (0.85, 1.0), "window": (1.0, 1.8), "board": (1.2, 2.4),
               "bookcase": (0.8, 1.3), "sofa": (1.4, 2.1), "clutter": (0.25, 0.55)}


def _build(kind: str, width: float, h: float, rng: np.random.Generator) -> tuple[Patches, np.ndarray | None]:
    """The thing of ``kind`` (a key of :data:`WALL_WIDTHS`) of ``width`` in its wall frame; its solid box."""
    if kind == "stairs":
        return obj.stairs(width, steps=4)
    if kind == "door":
        return obj.door(width, float(rng.uniform(2.0, 2.15)))
    if kind == "window":
        return obj.window(width, float(rng.uniform(0.8, 1.0)), min(h - 0.6, float(rng.uniform(2.0, 2.3))))
    if kind == "board":
        return obj.board(width, float(rng.uniform(0.85, 1.0)), float(rng.uniform(1.8, 2.1)))
    if kind == "bookcase":
        return obj.bookcase(width, float(rng.uniform(1.6, 2.2)))
    if kind == "sofa":
        return obj.sofa(width)
    size = np.array([width, *rng.uniform([0.25, 0.25], [0.45, 0.9])])  # bins, boxes, printers
    return place(obj.clutter_box(size), 0, (0, 0.05, 0)), None  # standing a little off the wall


def _wall_things(walls: Walls, h: float, rng: np.random.Generator, plan: list[str],
                 prefer: dict[str, list[int]]) -> list[Part]:
    """Doors, windows, boards, bookcases, sofas, floor clutter and stairs along the walls, in ``plan`` order.

    ``plan`` lists the kinds of :data:`WALL_WIDTHS` to place (the ones that must be there first),
    ``prefer`` maps a kind to the walls tried first. A thing with no free interval on any wall even at
    half its width is left out.
    """
    parts = []
    for kind in plan:
        low, high = WALL_WIDTHS[kind]
        drawn = float(rng.uniform(low, high))
        order = _order(rng, prefer.get(kind))
        for width in (drawn, max(low, 0.75 * drawn), max(low, 0.5 * drawn)):
            got = walls.claim_any(order, width, rng)
            if got is not None:
                parts.append(walls.put(kind, got[0], got[1], *_build(kind, width, h, rng)))
                break
    return parts


def office(rng: np.random.Generator, name: str, stairs: bool = False) -> RoomLayout:
    """An office: 1-2 desks with chairs, a sofa, bookcases, a board, windows, doors, a beam and a column."""
    size = np.array([rng.uniform(4.2, 6.5), rng.uniform(3.4, 5.0), rng.uniform(2.8, 3.3)])
    walls = Walls(size)
    parts = _structure(size)
    for k in rng.permutation(4)[: rng.integers(1, 3)]:
        column = _corner_column(walls, int(k), size[2], rng)
        if column is not None:
            parts.append(column)
    window_wall = int(rng.integers(4))
    # every office holds every class: one of each first, then the extras
    plan = ["stairs"] * stairs + ["door", "window", "board", "sofa", "bookcase", "clutter"]
    plan += ["door"] * int(rng.integers(2)) + ["window"] * int(rng.integers(2)) + \
        ["bookcase"] * int(rng.integers(2)) + ["clutter"] * int(rng.integers(3))
    parts += _wall_things(walls, size[2], rng, plan, {"window": [window_wall], "board": [(window_wall + 2) % 4]})
    beams = _beams(size, 1, rng, across=bool(rng.integers(2)))
    parts += beams
    parts += _ceiling_lights(size, int(rng.integers(1, 4)), parts, rng)
    # 1 desk, or 2 side by side along x with a 0.3-0.5 m gap when the room is long enough
    widths = rng.uniform(1.2, 1.5, size=2 if size[0] >= 5.2 and rng.random() < 0.5 else 1)
    gap = rng.uniform(0.3, 0.5)
    x = size[0] / 2 - (widths.sum() + gap * (len(widths) - 1)) / 2
    for width in widths:
        centre = (x + width / 2, size[1] / 2 + rng.uniform(-0.15, 0.15))
        chairs = {"-y": 1} if rng.random() < 0.6 else {"-y": 1, "+y": 1}
        parts += _table_with_chairs(centre, width, rng.uniform(0.7, 0.8), chairs, rng,
                                    clutter=int(rng.integers(1, 4)))
        x += width + gap
    return RoomLayout(name, "office", np.zeros(3), size, parts)


def conference_room(rng: np.random.Generator, name: str, stairs: bool = False) -> RoomLayout:
    """A conference room: one long table ringed with chairs, boards on the short walls, windows, doors."""
    size = np.array([rng.uniform(6.0, 9.0), rng.uniform(4.5, 6.5), rng.uniform(2.9, 3.4)])
    walls = Walls(size)
    parts = _structure(size)
    column = _corner_column(walls, int(rng.integers(4)), size[2], rng)
    if column is not None:
        parts.append(column)
    plan = ["stairs"] * stairs + ["door", "board", "window", "window"] + ["window"] * int(rng.integers(2)) + \
        ["door"] * int(rng.integers(2)) + ["board"] * int(rng.integers(2)) + ["bookcase"] * int(rng.random() < 0.5) + \
        ["sofa"] * int(rng.random() < 0.4) + ["clutter"] * int(rng.integers(3))
    short = [1, 3] if rng.random() < 0.5 else [3, 1]
    long_wall = [0, 2][int(rng.integers(2))]
    parts += _wall_things(walls, size[2], rng, plan, {"board": short, "window": [long_wall], "door": [2 - long_wall]})
    beams = _beams(size, int(rng.integers(1, 3)), rng, across=True)
    parts += beams
    parts += _ceiling_lights(size, int(rng.integers(2, 6)), parts, rng)
    width, depth = size[0] - rng.uniform(2.8, 3.4), rng.uniform(1.0, 1.4)
    per_side = max(2, int(width / 0.75))
    chairs = {"-y": per_side, "+y": per_side, "-x": int(rng.random() < 0.5), "+x": int(rng.random() < 0.5)}
    chairs = {side: count for side, count in chairs.items() if count}
    parts += _table_with_chairs(size[:2] / 2, width, depth, chairs, rng, clutter=int(rng.integers(3, 7)))
    return RoomLayout(name, "conferenceRoom", np.zeros(3), size, parts)


def hallway(rng: np.random.Generator, name: str, stairs: bool = False) -> RoomLayout:
    """A hallway along x: doors on the long walls, beams across with pilasters under them, bins, a window."""
    size = np.array([rng.uniform(8.0, 14.0), rng.uniform(1.9, 2.6), rng.uniform(2.7, 3.1)])
    walls = Walls(size)
    parts = _structure(size)
    beams = _beams(size, max(1, int(size[0] / 3.5)), rng, across=True)
    parts += beams
    if rng.random() < 0.6:  # pilasters: a column on each long wall under every beam
        for beam in beams:
            x_lo, x_hi = beam.solid[0][0], beam.solid[1][0]
            for wall in (0, 2):
                s = x_lo if wall == 0 else size[0] - x_hi
                if walls.free(wall, s, s + x_hi - x_lo, 0.05):
                    walls.used[wall].append((s, s + x_hi - x_lo))
                    parts.append(walls.put("column", wall, s, *obj.column(x_hi - x_lo, 0.2, size[2], corner=False)))
    else:
        column = _corner_column(walls, int(rng.integers(4)), size[2], rng)
        if column is not None:
            parts.append(column)
    parts += _ceiling_lights(size, int(rng.integers(1, 4)), parts, rng)
    plan = ["stairs"] * stairs + ["door"] * int(rng.integers(2, 5)) + ["window"] * int(rng.random() < 0.7) + \
        ["board"] * int(rng.random() < 0.3) + ["bookcase"] * int(rng.random() < 0.3) + \
        ["sofa"] * int(rng.random() < 0.25) + ["clutter"] * int(rng.integers(1, 4))
    ends = [1, 3] if rng.random() < 0.5 else [3, 1]
    parts += _wall_things(walls, size[2], rng, plan, {"stairs": ends, "window": ends, "door": [0, 2],
                                                     "clutter": [0, 2], "board": [0, 2]})
    return RoomLayout(name, "hallway", np.zeros(3), size, parts)


BUILDERS = {"office": office, "conferenceRoom": conference_room, "hallway": hallway}


def solid_boxes(layout: RoomLayout) -> np.ndarray:
    """The solid boxes of all parts of a room, float64 ``(B, 2, 3)``."""
    boxes = [p.solid for p in layout.parts if p.solid is not None]
    return np.stack(boxes) if boxes else np.zeros((0, 2, 3))
