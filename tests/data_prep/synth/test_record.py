"""`pointgeope synth` rerun over an OUT whose records are damaged: settings that cannot be read are one line
naming the file (they were tracebacks, or JSON's bare message), a damaged manifest is written anew from the
rooms kept (it was a traceback)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from data_prep.synth.dataset import MANIFEST, SETTINGS
from pointgeope.cli import main as cli

ARGS = ["--size", "tiny", "--areas", "2", "--rooms-per-area", "1", "--density", "10"]


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and p.name != ".lock"}


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> tuple[Path, dict[str, bytes]]:
    out = tmp_path_factory.mktemp("synth") / "raw"
    assert cli(["synth", str(out), *ARGS]) == 0
    return out, _files(out)


def _copy(made, tmp_path: Path) -> Path:
    out, files = made
    copy = tmp_path / "raw"
    for name, data in files.items():
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_bytes(data)
    return copy


@pytest.mark.parametrize(("text", "says"), [
    (b"", "not valid JSON (Expecting value: line 1 column 1"),
    (b'{"areas": 2', "not valid JSON"),
    (b"\xff\xfe{}", "not valid JSON ('utf-8' codec can't decode byte 0xff"),
    (b"[1, 2]", "a JSON list, not the mapping of settings synth writes"),
    (b"null", "a JSON NoneType, not the mapping of settings synth writes"),
    (b"1e999999", "a JSON float, not the mapping of settings synth writes"),
])
def test_damaged_settings_are_one_line_naming_the_file(made, tmp_path, capsys, text, says):
    """Before: `[1, 2]`, `null` and `1e999999` were AttributeError/TypeError tracebacks; the empty and
    undecodable files were `pointgeope synth: error: Expecting value: line 1 column 1 (char 0)`, no file named."""
    out = _copy(made, tmp_path)
    (out / SETTINGS).write_bytes(text)
    assert cli(["synth", str(out), *ARGS]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"pointgeope synth: error: {out / SETTINGS}: {says}"), err
    assert err[0].endswith(f"remove {out} and run synth again, or choose another OUT"), err
    assert (out / SETTINGS).read_bytes() == text   # nothing touched


@pytest.mark.parametrize("damage", [
    b"", b"\xff{", b"[1]", b"null",
    {"areas": [1]}, {"areas": {"Area_1": 5}}, {"areas": {"Area_1": None}}, {"areas": {}},
    {"totals": None}, {"totals": {"rooms": "2"}}, {"defects": {}}, {"defects": [1]},
    {"defects": [{"kind": "stairs", "file": "x"}]},
])
def test_a_damaged_manifest_is_written_anew_from_the_rooms_kept(made, tmp_path, capsys, damage):
    """Before: a manifest with the run's settings whose areas were a list or held a number was an
    AttributeError/TypeError traceback; `{"areas": {}}` or damaged totals were taken for a finished run, and the
    summary printed from them was a KeyError/TypeError traceback; an empty file was JSON's bare message."""
    out = _copy(made, tmp_path)
    good = json.loads((out / MANIFEST).read_text())
    if isinstance(damage, bytes):
        (out / MANIFEST).write_bytes(damage)
    else:
        (out / MANIFEST).write_text(json.dumps({**good, **damage}))
    assert cli(["synth", str(out), *ARGS]) == 0
    printed = capsys.readouterr().out
    assert "kept Area_1/office_1" in printed and "kept Area_2/office_1" in printed and "wrote" not in printed
    assert _files(out) == made[1]   # the very bytes of the run that made it, manifest included


@pytest.mark.parametrize("record", [5, None, {}, {"files": ["wall_1.txt"]}])
def test_a_manifest_whose_room_record_is_damaged_is_written_anew(made, tmp_path, capsys, record):
    """Before: a manifest of the run's settings and rooms whose record of Area_1/office_1 was a number, or had
    no mapping of its files, was taken for a finished run: "nothing to do", the damaged manifest left as it was."""
    out = _copy(made, tmp_path)
    good = json.loads((out / MANIFEST).read_text())
    good["areas"]["Area_1"]["office_1"] = record
    (out / MANIFEST).write_text(json.dumps(good))
    assert cli(["synth", str(out), *ARGS]) == 0
    assert "kept Area_1/office_1" in capsys.readouterr().out
    assert _files(out) == made[1]


@pytest.mark.parametrize("edit", [{"seed": "9" * 100_000}, {"seed": 1, "x" * 100_000: 1}, {"a\nb": "c\nd"}])
def test_settings_edited_by_hand_are_said_in_one_bounded_line(made, tmp_path, capsys, edit):
    """Before: settings that were a mapping with other values were said whole: a 100,000-character value or key
    made a refusal line as long (the newline of a key was, and stays, one line)."""
    out = _copy(made, tmp_path)
    settings = json.loads((out / SETTINGS).read_text())
    (out / SETTINGS).write_text(json.dumps({**settings, **edit}))
    assert cli(["synth", str(out), *ARGS]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and len(err[0]) < 1200, (len(err), len(err[0]))
    assert err[0].startswith(f"pointgeope synth: error: {out} was generated with other settings ("), err
    assert err[0].endswith(" asked); remove it or choose another OUT"), err
    assert ("characters)" in err[0]) == (len(json.dumps(edit)) > 1000), err


def _more(counts: dict, name: str, by: int) -> dict:
    return {**counts, name: counts[name] + by}


@pytest.mark.parametrize("damage", ["rooms", "points", "a class", "a room's class", "a class more"])
def test_totals_that_are_not_the_sums_of_the_rooms_are_written_anew(made, tmp_path, capsys, damage):
    """Before: totals of the right types but other values (`"rooms": 10**30`, a class's points one more) were
    taken for a finished run: "nothing to do", the summary printed them, the manifest left as it was."""
    out = _copy(made, tmp_path)
    manifest = json.loads((out / MANIFEST).read_text())
    totals, room = manifest["totals"], manifest["areas"]["Area_1"]["office_1"]
    if damage == "rooms":
        totals["rooms"] = 10**30
    elif damage == "points":
        totals["points"] += 1
    elif damage == "a class":
        totals["class_counts"] = _more(totals["class_counts"], "wall", 1)
    elif damage == "a room's class":
        room["class_counts"] = _more(room["class_counts"], "wall", 1)
    else:
        totals["class_counts"]["stairs"] = 0
    (out / MANIFEST).write_text(json.dumps(manifest))
    assert cli(["synth", str(out), *ARGS]) == 0
    printed = capsys.readouterr().out
    assert "kept Area_1/office_1" in printed and "kept Area_2/office_1" in printed and "wrote" not in printed
    assert _files(out) == made[1]
