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
    parts: list[np.ndarray] = []  # (n_i, 6) float64 per file
    labels, instances = [], []  # per part
    messages: list[str] = []
    repaired = dropped = num_bytes = 0
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
        name = object_class(entry.path)
        if name not in CLASS_INDEX:
            remapped[name] = remapped.get(name, 0) + len(parsed.values)
        parts.append(parsed.values)
        labels.append(CLASS_INDEX.get(name, CLUTTER))
        instances.append(instance)
    values = np.concatenate(parts) if parts else np.empty((0, 6))
    counts = [len(p) for p in parts]
    rgb = np.rint(values[:, 3:])
    arrays = {
        "coord": values[:, :3].astype(np.float32),
        "color": np.clip(rgb, 0, 255).astype(np.uint8),
        "label": np.repeat(np.array(labels, dtype=np.uint8), counts),
        "instance": np.repeat(np.array(instances, dtype=np.int32), counts),
    }
    clipped = int(np.count_nonzero((rgb < 0) | (rgb > 255)))
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
