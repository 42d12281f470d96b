"""data_prep/room.py: labels, instance ids, colour rounding and the defect counts of one room."""
from __future__ import annotations

import json

import numpy as np

from data_prep.room import load_room
from data_prep.source import open_source
from pointgeope.constants import CLASS_INDEX, CLUTTER
from tests.data_prep.raw_trees import write_tree


def test_one_room(tmp_path):
    write_tree(tmp_path, {
        "Area_1/r/Annotations/wall_1.txt": b"0 0 0 0.4 0.5 255.5\n1 1 1 1.5 2.5 -0.6\n",  # rint: half to even
        "Area_1/r/Annotations/Stairs_2.txt": b"2 2 2 9 9 9\n",
        "Area_1/r/Annotations/beam_1.txt": b"   \n\n",  # blank: empty
        "Area_1/r/Annotations/board_1.txt": b"3 3 3 1 1 1\n4 4 4 1 1\n",
    })
    source = open_source(tmp_path)
    (room,) = source.rooms()
    data = load_room(source, room)
    np.testing.assert_array_equal(data.arrays["color"], [[1, 1, 1], [9, 9, 9], [0, 0, 255], [2, 2, 0]])
    np.testing.assert_array_equal(data.arrays["coord"], [[3, 3, 3], [2, 2, 2], [0, 0, 0], [1, 1, 1]])
    np.testing.assert_array_equal(data.arrays["label"], [CLASS_INDEX["board"], CLUTTER,
                                                         CLASS_INDEX["wall"], CLASS_INDEX["wall"]])
    np.testing.assert_array_equal(data.arrays["instance"], [1, 2, 3, 3])  # beam_1 (empty) keeps id 0
    assert data.attrs["objects"] == ["beam_1", "board_1", "Stairs_2", "wall_1"]
    assert data.attrs["empty_files"] == ["Area_1/r/Annotations/beam_1.txt"]
    assert json.loads(data.attrs["remapped_to_clutter"]) == {"stairs": 1}
    assert (data.attrs["dropped_lines"], data.attrs["repaired_lines"], data.attrs["clipped_colors"]) == (1, 0, 2)
    assert data.attrs["class_counts"].tolist() == np.bincount(data.arrays["label"], minlength=13).tolist()
    assert data.messages == ["Area_1/r/Annotations/beam_1.txt: skipped: empty file",
                             "Area_1/r/Annotations/board_1.txt:2: dropped: expected 6 values, got 5: '4 4 4 1 1'"]
    assert data.num_bytes == sum(len(source.read(f.path)) for f in room.files)
