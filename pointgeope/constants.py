"""Names and numbers of S3DIS that the whole project shares: one place owns them.

Classes in the standard order (labels 0..12), the areas and their rooms, the 13-colour palette used by every plot and
viewer, the ignore label and the room size limit (the HDF5 layout and its version: ``pointgeope/h5.py``).
"""
from __future__ import annotations

import re

CLASS_NAMES: tuple[str, ...] = (
    "ceiling", "floor", "wall", "beam", "column", "window", "door",
    "table", "chair", "sofa", "bookcase", "board", "clutter",
)
NUM_CLASSES = len(CLASS_NAMES)
CLASS_INDEX = {name: i for i, name in enumerate(CLASS_NAMES)}
CLUTTER = CLASS_INDEX["clutter"]

AREAS: tuple[str, ...] = tuple(f"Area_{k}" for k in range(1, 7))
# Rooms of each area in S3DIS (Stanford3dDataset_v1.2_Aligned_Version, 272 in all): a fold's training and
# test sizes follow from them (bench/fold_estimate.py). Prepare and the loaders read the rooms that are there.
AREA_ROOMS: dict[str, int] = {"Area_1": 44, "Area_2": 40, "Area_3": 23, "Area_4": 49, "Area_5": 68, "Area_6": 48}

# An area's name, Area_N (S3DIS's folders, prepare's Area_N.h5 files and their root attribute "area"): group 1
# is N. The one rule of it: prepare's raw tree (data_prep.names), the prepared files (h5), the viewer.
AREA_NAME = re.compile(r"Area_(\d+)")

# A run's fold folder, RUN/area_K (train --test-area K writes it; evaluate, predict and the viewer know it by
# this name): group 1 is K.
FOLD_NAME = re.compile(r"area_(\d+)")


def fold_folder_name(fold: int) -> str:
    """The name of fold ``fold``'s folder in a run, ``area_K``: what :data:`FOLD_NAME` recognises."""
    return f"area_{fold}"

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


def class_names(num_classes: int) -> list[str]:
    """The names of a network's ``num_classes`` classes: the first of :data:`CLASS_NAMES`, then ``class_13``,
    ``class_14``, ... for the classes beyond S3DIS's 13 (a network trained on labels of one's own)."""
    return list(CLASS_NAMES[:num_classes]) + [f"class_{k}" for k in range(NUM_CLASSES, num_classes)]


def written_names(names, num_classes: int) -> list[str]:
    """``names`` (a list or tuple of str) as the class names of a network of ``num_classes`` classes: S3DIS's
    13 alone, which pointgeope wrote for a network of more classes before the classes beyond 13 were named
    (a checkpoint's ``"predict"`` entry, a fold's ``metrics.json``), are :func:`class_names` ``(num_classes)``;
    any other names as they are (a mismatch is the reader's to refuse)."""
    if num_classes > NUM_CLASSES and tuple(names) == tuple(CLASS_NAMES):
        return class_names(num_classes)
    return list(names)


def class_palette(num_classes: int) -> list[list[int]]:
    """The ``[r, g, b]`` colours (0..255) of a network's ``num_classes`` classes: the first of :data:`PALETTE`,
    then for class ``k >= 13`` the HSV colour of hue ``frac((k - 13) * g)``, ``g = (sqrt(5) - 1) / 2``
    (golden-ratio steps: successive classes far apart in hue), saturation 0.65, value 0.85, each channel
    ``round(255 * x)``: class 13 is ``[217, 76, 76]``. Fixed by the class number alone, so a checkpoint's
    palette and one derived again agree."""
    import colorsys

    step = (5 ** 0.5 - 1) / 2
    extra = [colorsys.hsv_to_rgb((k - NUM_CLASSES) * step % 1.0, 0.65, 0.85) for k in range(NUM_CLASSES, num_classes)]
    return [list(c) for c in PALETTE[:num_classes]] + [[round(255 * x) for x in rgb] for rgb in extra]


# Largest extent of a room, metres: prepare drops (or refuses) points farther than this from a room's
# median and refuses rooms larger than this (--max-extent); readers refuse rooms beyond the limit the
# area file was prepared with. S3DIS rooms are at most ~50 m; 1 km keeps voxel keys far from overflow.
MAX_ROOM_EXTENT = 1000.0

# Default --max-extent of predict, metres from the scan's median on an axis. The network only saw
# S3DIS-like rooms (at most ~50 m, above; the two real rooms of tests/fixtures/s3dis span at most
# 6.4 m and lie within 3.3 m of their median), and a room that spans at most M on each axis lies within M
# of its median: 50 m keeps every such room (and one 100 m long about its median). A point beyond it is no
# part of a room the network can segment, and kept, it changes the other points' labels (the voxel grid's
# origin, the crops, the network's sampling). --max-extent raises it; prepare keeps its own 1 km limit.
PREDICT_MAX_EXTENT = 50.0
# Default --max-fragments of predict where the run's eval.max_fragments is null (every fragment, as the
# s3dis configs evaluate). A scan has as many fragments as points in its densest voxel, and each costs a
# pass over the whole scan: repeated points (a clump of 3,000 copies of one point took 77 s on a 3,000-point
# scan; the resampled office of the samples has 5,406 at 4 cm) would run for hours. At most 100 fragments
# keep every point of a voxel of up to 100 points predicted at least once, as evaluate does; the points of
# denser voxels that they miss take their voxel's summed votes (data/fragments.py: fill_from_voxels).
PREDICT_MAX_FRAGMENTS = 100
# The largest --max-extent predict accepts: the network's float32 squared distances overflow near 1e19 m
# (a point kept at 1e30 m ended in an IndexError); 1000 km is far inside what it handles (tried to 1e15 m).
PREDICT_EXTENT_LIMIT = 1e6

# The viewer draws by default at most this many points of a room (a seeded random sample above; --max-points).
# Measured here: 2M points took 8 s per frame with software OpenGL (Mesa llvmpipe) on a busy 2-core machine;
# a GPU draws them smoothly.
DEFAULT_MAX_POINTS = 1_000_000

# The colourings of the viewer (its keys 1..4; pointgeope/viz/colors.py), here so that `pointgeope viz`'s
# options name them without importing numpy.
VIEW_MODES: tuple[str, ...] = ("rgb", "gt", "pred", "error")
