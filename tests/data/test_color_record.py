"""Tests of pointgeope/data/color_record.py: prepare records a room without colour (every point 0 0 0) and names
it once in its summary; train, fed colour, warns of such a training room at the fold's start, from that record."""
from __future__ import annotations

import numpy as np
import torch

from data_prep.prepare import PrepareConfig, prepare
from pointgeope import h5
from pointgeope.data.color_record import NO_COLOR, colorless_rooms, colorless_warning, has_no_color
from pointgeope.data.folds import load_folds
from pointgeope.engine.config import load_config
from pointgeope.engine.distributed import DistEnv
from pointgeope.engine.fold_check import check_fold
from pointgeope.engine.runio import Log
from tests.data_prep.raw_trees import write_tree

DARK = b"0 0 0 0 0 0\n1 0 0 0 0 0\n0 1 0 0 0 0\n0 0 1 0 0 0\n"          # every point 0 0 0
LIT = b"0 0 0 0 0 0\n1 0 0 0 0 0\n0 1 0 0 0 7\n0 0 1 0 0 0\n"           # one point with colour: not dark
ROOMS = {"Area_1/dark_1/Annotations/table_1.txt": DARK, "Area_1/lit_1/Annotations/table_1.txt": LIT,
         "Area_2/dark_2/Annotations/floor_1.txt": DARK, "Area_2/lit_2/Annotations/floor_1.txt": LIT}
SAID = "  without colour (every point 0 0 0; a model fed colour sees them black): "


def _prepared(tmp_path, capsys):
    out = tmp_path / "out"
    prepare(PrepareConfig(write_tree(tmp_path / "raw", ROOMS), out, progress=False))
    return out, capsys.readouterr().out


def test_has_no_color():
    assert has_no_color(np.zeros((3, 3), np.uint8))
    assert not has_no_color(np.array([[0, 0, 0], [0, 0, 1]], np.uint8))
    assert not has_no_color(np.zeros((0, 3), np.uint8))     # no point: nothing to say of its colour


def test_prepare_records_and_names_the_rooms_without_colour_once(tmp_path, capsys):
    out, printed = _prepared(tmp_path, capsys)
    for area, dark, lit in (("Area_1", "dark_1", "lit_1"), ("Area_2", "dark_2", "lit_2")):
        attrs = h5.read_rooms_attrs(out / f"{area}.h5")
        assert bool(attrs[dark][NO_COLOR]) and not attrs[lit][NO_COLOR]
    lines = printed.splitlines()
    assert [line for line in lines if line.startswith(SAID)] == [SAID + "dark_1", SAID + "dark_2"]
    assert colorless_rooms(out, ["Area_1", "Area_2"]) == ["Area_1/dark_1", "Area_2/dark_2"]
    # a second prepare, every room up to date, names them again from the record (its summary is whole)
    prepare(PrepareConfig(tmp_path / "raw", out, progress=False))
    assert [line for line in capsys.readouterr().out.splitlines() if line.startswith(SAID)] == [
        SAID + "dark_1", SAID + "dark_2"]


def test_train_fed_colour_warns_of_its_training_rooms_without_colour_once_a_command(tmp_path, capsys):
    out, _ = _prepared(tmp_path, capsys)
    folds = load_folds(out)
    env = DistEnv(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))

    def warning(room):
        return (f"warning: data.color feeds colour, but 1 training room has none (every point 0 0 0, as prepare "
                f"recorded): {room}; the network learns them as black rooms (data.color=false trains on geometry "
                "alone)")

    for color in (True, False):
        cfg = load_config(None, [f"data.root={out}", f"data.color={str(color).lower()}"])
        said: set[str] = set()
        for k, fold in enumerate((1, 2, 1)):      # a third fold whose training rooms are the first one's
            log = Log(tmp_path / f"{color}_{k}.txt")
            check_fold(cfg, fold, folds, env, log, said)
            printed = [line for line in capsys.readouterr().out.splitlines() if "colour" in line]
            logged = [line for line in log.path.read_text().splitlines() if "colour" in line]
            expected = warning("Area_2/dark_2" if fold == 1 else "Area_1/dark_1") if color else None
            assert [line.split(" ", 2)[2] for line in logged] == ([expected] if color else [])  # after the time
            assert [line.split(" ", 2)[2] for line in printed] == ([expected] if color and k < 2 else [])


def test_the_warning_counts_its_rooms_and_says_nothing_without_any(tmp_path, capsys):
    out, _ = _prepared(tmp_path, capsys)
    assert colorless_warning(out, ["Area_1", "Area_2"]) == (
        "warning: data.color feeds colour, but 2 training rooms have none (every point 0 0 0, as prepare recorded): "
        "Area_1/dark_1, Area_2/dark_2; the network learns them as black rooms (data.color=false trains on geometry "
        "alone)")
    assert colorless_warning(out, []) is None


def test_prepare_into_a_folder_of_before_the_colour_record_records_it_so_that_train_warns(tmp_path, capsys,
                                                                                         monkeypatch):
    """A folder prepared with this version's normals but before the colour record (the hour between the two) keeps
    no ``no_color``: a prepare into it found every room up to date and recorded nothing, so train never warned of
    its rooms without colour. Now the rerun reads the rooms' stored colours and records it, neither parsing a raw
    file nor estimating a normal: the files of a fresh prepare, byte for byte, the older ones listed as of the same
    points (runs trained on them stay valid)."""
    import data_prep.room
    from pointgeope.checksum import file_checksum
    from pointgeope.json_text import loads

    load = data_prep.room.load_room

    def before_the_record(*args, **kwargs):
        data = load(*args, **kwargs)
        del data.attrs[NO_COLOR]
        return data

    raw, out, areas = write_tree(tmp_path / "raw", ROOMS), tmp_path / "out", ["Area_1", "Area_2"]
    monkeypatch.setattr(data_prep.room, "load_room", before_the_record)
    prepare(PrepareConfig(raw, out, progress=False))
    monkeypatch.undo()
    assert colorless_rooms(out, areas) == []
    older = {area: file_checksum(out / f"{area}.h5") for area in areas}
    parsed = []
    monkeypatch.setattr(data_prep.room, "load_room", lambda *a, **k: parsed.append(a) or load(*a, **k))
    monkeypatch.setattr(data_prep.room, "add_normals", lambda *a: parsed.append(a) or 0.0)
    capsys.readouterr()
    prepare(PrepareConfig(raw, out, progress=False))
    assert parsed == [] and colorless_rooms(out, areas) == ["Area_1/dark_1", "Area_2/dark_2"]
    printed = capsys.readouterr()
    assert ("note: Area_1: 2 rooms stored before prepare recorded the rooms without colour (an older prepare): "
            "reading their stored colours to record it, their normals and raw files as they are") in printed.err
    assert "Area_1: 2 rooms (none parsed, 2 with the colour record added), 8 points; wrote " in printed.out
    assert "; parsed nothing; added the colour record of 4 rooms from their stored colours in " in printed.out
    assert [line for line in printed.out.splitlines() if line.startswith(SAID)] == [SAID + "dark_1", SAID + "dark_2"]
    monkeypatch.undo()
    prepare(PrepareConfig(raw, tmp_path / "fresh", progress=False))
    manifest = loads((out / "manifest.json").read_text())
    for area in areas:
        assert file_checksum(out / f"{area}.h5") == file_checksum(tmp_path / "fresh" / f"{area}.h5")
        assert older[area] in manifest["same_points"][area]
    capsys.readouterr()
    prepare(PrepareConfig(raw, out, progress=False))                                  # and then up to date
    assert "parsed nothing (every room up to date)" in capsys.readouterr().out
