"""Raw S3DIS trees for the data_prep tests (helpers, not tests), and an independent np.loadtxt reading."""
from __future__ import annotations

import re
import zipfile
from pathlib import Path

import numpy as np

from tests.test_constants import S3DIS_LABEL_IDS


def write_tree(root: Path, files: dict[str, bytes]) -> Path:
    """Write ``{relative path: bytes}`` under ``root`` (folders made as needed)."""
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def reference_room(room_dir: Path) -> dict[str, np.ndarray]:
    """A room read the simple way: np.loadtxt per annotation file, files sorted by (class, number); labels
    from the literal S3DIS ids (a class outside the 13 is clutter, 12)."""
    def key(path: Path):
        name, k = re.fullmatch(r"(.+)_(\d+)", path.stem).groups()
        return name, int(k)

    parts = {"coord": [], "color": [], "label": [], "instance": []}
    for i, path in enumerate(sorted((room_dir / "Annotations").glob("*.txt"), key=key)):
        values = np.loadtxt(path, ndmin=2)
        n = len(values)
        parts["coord"].append(values[:, :3].astype(np.float32))
        parts["color"].append(values[:, 3:].astype(np.uint8))
        parts["label"].append(np.full(n, S3DIS_LABEL_IDS.get(key(path)[0], 12), np.uint8))
        parts["instance"].append(np.full(n, i, np.int32))
    return {k: np.concatenate(v) for k, v in parts.items()}


# Every defect of the real S3DIS files that prepare handles, planted in one small tree; the expected outcome
# is spelled out in the tests.
DEFECT_FILES = {
    # CRLF, tabs, trailing spaces, a stray control byte inside a number (line 3)
    "Area_1/room_a/Annotations/ceiling_1.txt":
        b"1.0 2.0 3.0 10 20 30\r\n4.5\t5.5  6.5\t40 50 60   \r\n103.0\x100000 1.25 2.5 70 80 90\r\n",
    # line 2: five values; line 4: a non-numeric token; line 5: seven values
    "Area_1/room_a/Annotations/wall_1.txt":
        b"0.5 0.5 0.5 1 2 3\n1 2 3 4 5\n0.25 0.75 1.5 4 5 6\n1 2 abc 4 5 6\n1 2 3 4 5 6 7\n",
    "Area_1/room_a/Annotations/stairs_1.txt": b"9 9 9 100 100 100\n8 8 8 101 101 101\n7 7 7 102 102 102\n",
    "Area_1/room_a/Annotations/chair_10.txt": b"-1.5 -2.5 -3.5 12.6 300 -4\n",  # float and out-of-range colours
    "Area_1/room_a/Annotations/chair_2.txt": b"0.125 0.25 0.375 5 6 7\n",
    "Area_1/room_a/Annotations/door_1.txt": b"",
    "Area_1/room_a/room_a.txt": b"this room file is ignored\n",
    "Area_1/room_a/Annotations/.DS_Store": b"\x00\x01junk",
    "Area_1/room_a/Annotations/._ceiling_1.txt": b"\x00\x05junk",
    "__MACOSX/Area_1/room_a/Annotations/._wall_1.txt": b"\x00junk",
    "Area_1/Area_1_alignmentAngle.txt": b"## Global alignment angle per disjoint space in Area_1 ##\n",
    "Area_2/room_b/Annotations/floor_1.txt": b"0 0 0 1 1 1\n1 0 0 2 2 2\n",
    "Area_2/room_b/Annotations/table_1.txt": b"0.5 0.5 0.75 3 3 3\n",
}


OUTPUT_FILES = ("Area_1.h5", "Area_2.h5", "manifest.json", "folds.json")


def output_bytes(out: Path) -> dict[str, bytes]:
    """The bytes of each file ``prepare`` writes for the trees here (two areas), to compare runs."""
    return {name: (out / name).read_bytes() for name in OUTPUT_FILES}


def five_rooms(root: Path) -> Path:
    """:data:`DEFECT_FILES` with three more rooms in Area_1, written under ``root``."""
    files = dict(DEFECT_FILES)
    for k in range(3):  # more rooms in Area_1
        files[f"Area_1/office_{k}/Annotations/table_1.txt"] = f"{k} 1 2 3 4 5\n{k}.5 1 2 3 4 5\n".encode()
    return write_tree(root, files)


def zip_tree(path: Path, files: dict[str, bytes]) -> Path:
    """A zip at ``path`` holding ``files`` (member name -> bytes), deflated."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return path


def room_summary(source) -> list[tuple[str, str, str, list[str]]]:
    """``(area, room, path, [annotation file names])`` of every room a raw source lists."""
    return [(r.area, r.name, r.path, [f.path.rsplit("/", 1)[-1] for f in r.files]) for r in source.rooms()]


# room_summary of DEFECT_FILES: its junk and loose files left out, objects in class-then-number order
DEFECT_ROOMS = [
    ("Area_1", "room_a", "Area_1/room_a",
     ["ceiling_1.txt", "chair_2.txt", "chair_10.txt", "door_1.txt", "stairs_1.txt", "wall_1.txt"]),
    ("Area_2", "room_b", "Area_2/room_b", ["floor_1.txt", "table_1.txt"]),
]
