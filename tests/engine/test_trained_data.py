"""check_data_of: the checkpoint's data record is checked before anything reads it."""
from __future__ import annotations

import pytest

from pointgeope.engine.checkpoint import CheckpointError
from pointgeope.engine.trained_data import check_data_of


@pytest.mark.parametrize("data, shown", [(7, "7"), (3.5, "3.5")])
def test_a_damaged_data_record_of_a_normals_run_is_one_checkpoint_error(tmp_path, data, shown):
    """``evaluate`` asks check_data_of directly (no resume's saved_data before it). For a ``data.normal`` run
    recorded without ``data_normals`` the normals' record iterated the areas of ``"data"`` first: a number there
    was "TypeError: 'int' object is not iterable" instead of the line that names the entry."""
    path = tmp_path / "last.pt"
    ckpt = {"config": {"data": {"normal": True, "root": str(tmp_path)}}, "data": data}
    with pytest.raises(CheckpointError) as err:
        check_data_of(path, ckpt, {"Area_1": "sha256:1"}, tmp_path, lambda line: None)
    assert str(err.value) == (f"{path}: damaged checkpoint: expected its 'data' entry to map each area to the "
                              f"checksum of its file, got {shown}; use the run's own checkpoint")


def test_areas_whose_points_nothing_records_are_said_with_a_verb_of_their_number(tmp_path):
    """Before: ``whether Area_1 differ(s) only in where it was prepared from``."""
    from pointgeope.engine.trained_data import check_data

    for now, said in (({"Area_1": "sha256:1"}, "whether Area_1 differs only"),
                      ({"Area_1": "sha256:1", "Area_2": "sha256:2"}, "whether Area_1, Area_2 differ only")):
        with pytest.raises(CheckpointError) as err:
            check_data(tmp_path / "last.pt", {}, now, tmp_path, lambda line: None)
        assert said in str(err.value)
