"""Turn the annotation files of one raw room into the arrays and attributes of a prepared room.

Instance ids follow the order of ``room.files`` (class, then object number: ``chair_2`` before
``chair_10``); ``attrs["objects"][i]`` names the file of instance ``i``. A class outside the 13 of
``pointgeope.constants`` (S3DIS has ``stairs``) is labelled clutter and counted in ``remapped``.
Colours are rounded and clipped to ``0..255`` (some files hold floats).
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import PurePosixPath

import numpy as np

from data_prep.parse import parse_points
from data_prep.source import Room, Source, object_class
from pointgeope.constants import CLASS_INDEX, CLUTTER, NUM_CLASSES

MAX_STORED_ISSUES = 1000  # messages kept in a room's attributes (the counts are always exact)


@dataclass
class RoomData:
    """A parsed room: ``arrays`` (coord, color, label, instance), ``attrs`` and the messages to print."""

    arrays: dict[str, np.ndarray]
    attrs: dict
    messages: list[str] = field(default_factory=list)
    num_bytes: int = 0
    seconds: float = 0.0


def load_room(source: Source, room: Room) -> RoomData:
    """Read and parse every annotation file of ``room``; report repairs, drops and empty files by file and line."""
    start = time.perf_counter()
    coords, colors, labels, instances = [], [], [], []
    messages: list[str] = []
    repaired = dropped = clipped = num_bytes = 0
    empty: list[str] = []
    remapped: dict[str, int] = {}
    for instance, entry in enumerate(room.files):
        data = source.read(entry.path)
        num_bytes += len(data)
        if not data.strip():
            empty.append(entry.path)
            messages.append(f"{entry.path}: skipped: empty file")
            continue
        parsed = parse_points(data)
        repaired += parsed.count("repaired")
        dropped += parsed.count("dropped")
        messages.extend(f"{entry.path}:{i.line}: {i.kind}: {i.message}" for i in parsed.issues)
        values = parsed.values
        n = values.shape[0]
        name = object_class(entry.path)
        label = CLASS_INDEX.get(name, CLUTTER)
        if name not in CLASS_INDEX:
            remapped[name] = remapped.get(name, 0) + n
        rgb = np.rint(values[:, 3:])
        clipped += int(((rgb < 0) | (rgb > 255)).sum())
        coords.append(values[:, :3].astype(np.float32))
        colors.append(np.clip(rgb, 0, 255).astype(np.uint8))
        labels.append(np.full(n, label, dtype=np.uint8))
        instances.append(np.full(n, instance, dtype=np.int32))
    arrays = {
        "coord": np.concatenate(coords) if coords else np.empty((0, 3), np.float32),
        "color": np.concatenate(colors) if colors else np.empty((0, 3), np.uint8),
        "label": np.concatenate(labels) if labels else np.empty(0, np.uint8),
        "instance": np.concatenate(instances) if instances else np.empty(0, np.int32),
    }
    attrs = {
        "num_points": int(arrays["label"].shape[0]),
        "source": f"{room.location}/{room.path}",
        "signature": room.signature(),
        "objects": [PurePosixPath(f.path).stem for f in room.files],
        "class_counts": np.bincount(arrays["label"], minlength=NUM_CLASSES).astype(np.int64),
        "num_bytes": num_bytes,
        "repaired_lines": repaired,
        "dropped_lines": dropped,
        "empty_files": empty,
        "remapped_to_clutter": json.dumps(dict(sorted(remapped.items()))),
        "clipped_colors": clipped,
        "issues": messages[:MAX_STORED_ISSUES],
    }
    return RoomData(arrays, attrs, messages, num_bytes, time.perf_counter() - start)
