"""Names and numbers of S3DIS that the whole project shares: one place owns them.

Classes in the standard order (labels 0..12), the areas, the 13-colour palette used by every plot and
viewer, the ignore label and the room size limit (the HDF5 layout and its version: ``pointgeope/h5.py``).
"""
from __future__ import annotations

CLASS_NAMES: tuple[str, ...] = (
    "ceiling", "floor", "wall", "beam", "column", "window", "door",
    "table", "chair", "sofa", "bookcase", "board", "clutter",
)
NUM_CLASSES = len(CLASS_NAMES)
CLASS_INDEX = {name: i for i, name in enumerate(CLASS_NAMES)}
CLUTTER = CLASS_INDEX["clutter"]

AREAS: tuple[str, ...] = tuple(f"Area_{k}" for k in range(1, 7))

IGNORE_LABEL = 255

# One RGB colour per class (uint8), the palette of every plot, screenshot and PLY export.
PALETTE: tuple[tuple[int, int, int], ...] = (
    (152, 223, 138),  # ceiling
    (31, 119, 180),   # floor
    (174, 199, 232),  # wall
    (255, 187, 120),  # beam
    (188, 189, 34),   # column
    (140, 86, 75),    # window
    (255, 152, 150),  # door
    (214, 39, 40),    # table
    (197, 176, 213),  # chair
    (148, 103, 189),  # sofa
    (196, 156, 148),  # bookcase
    (23, 190, 207),   # board
    (100, 100, 100),  # clutter
)

# Largest extent of a room, metres: prepare drops (or refuses) points farther than this from a room's
# median and refuses rooms larger than this (--max-extent); readers refuse rooms beyond the limit the
# area file was prepared with. S3DIS rooms are at most ~50 m; 1 km keeps voxel keys far from overflow.
MAX_ROOM_EXTENT = 1000.0
