"""pointgeope/report/machine.py: the machines a run's folds were trained and tested on, compared by the report.

Folds that differ in device, precision, DDP processes, CPU threads (on the CPU) or torch version are pooled,
with one note naming the folds and what differs; folds alike add no note; no torch is imported."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pointgeope.cli import main as cli
from tests.test_report import perfect, write_fold

pytestmark = pytest.mark.usefixtures("figures_not_drawn")  # they read no figure


CPU = {"device": "cpu", "processes": 1, "threads": 1, "precision": "float32", "torch": "2.13.0"}
GPU = {"device": "cuda", "device_name": "NVIDIA H200", "processes": 1, "threads": 8, "precision": "bf16",
       "torch": "2.13.0+cu126"}


def _run(tmp_path, trained: dict, tested: dict | None = None, name: str = "run"):
    """Six complete folds, each trained on ``trained[k]`` (a list of records, or one record; default CPU) and
    tested on ``tested[k]`` (default: CPU)."""
    run = tmp_path / name
    for k in range(1, 7):
        write_fold(run, k, perfect())
        path = run / f"area_{k}" / "metrics.json"
        metrics = json.loads(path.read_text())
        train = trained.get(k, CPU)
        metrics["trained_on"] = train if isinstance(train, list) or train is None else [train]
        metrics["tested_on"] = (tested or {}).get(k, CPU)
        path.write_text(json.dumps(metrics))
    return run


def _report(run, tmp_path, capsys) -> tuple[list[str], dict]:
    """``pointgeope report RUN``: the notes of report.md (exit 0 asserted) and report.json's run entry."""
    out = tmp_path / "out"
    assert cli(["report", str(run), "--out", str(out)]) == 0
    capsys.readouterr()
    notes = [line for line in (out / "report.md").read_text().splitlines()
             if "different machines" in line or "not all recorded" in line]
    return notes, json.loads((out / "report.json").read_text())["runs"][0]


def test_folds_alike_say_nothing(tmp_path, capsys):
    notes, entry = _report(_run(tmp_path, {}), tmp_path, capsys)
    assert notes == [] and entry["machines"]["differ"] == []
    assert entry["machines"]["folds"]["Area_4"] == {
        "train device": "cpu", "train precision": "float32", "train DDP processes": "1", "train CPU threads": "1",
        "train torch": "2.13.0", "test device": "cpu", "test precision": "float32", "test DDP processes": "1",
        "test CPU threads": "1", "test torch": "2.13.0"}


@pytest.mark.parametrize("change, aspect, said", [
    ({"device": "cuda", "device_name": "NVIDIA A100", "threads": 1}, "train device",
     "cpu (Area_1..Area_3, Area_5, Area_6), cuda (NVIDIA A100) (Area_4)"),
    ({"precision": "bf16"}, "train precision", "float32 (Area_1..Area_3, Area_5, Area_6), bf16 (Area_4)"),
    ({"threads": 2}, "train CPU threads", "1 (Area_1..Area_3, Area_5, Area_6), 2 (Area_4)"),
    ({"processes": 4}, "train DDP processes", "1 (Area_1..Area_3, Area_5, Area_6), 4 (Area_4)"),
    ({"torch": "2.12.1"}, "train torch", "2.13.0 (Area_1..Area_3, Area_5, Area_6), 2.12.1 (Area_4)"),
])
def test_a_fold_trained_on_another_machine_is_pooled_with_a_note_naming_it(tmp_path, capsys, change, aspect, said):
    """Before: the report pooled the six folds and said nothing (metrics.json recorded no machine: its config's
    train.device and train.threads say auto and None, and report ignored them and train.amp)."""
    notes, entry = _report(_run(tmp_path, {4: {**CPU, **change}}), tmp_path, capsys)
    assert notes == [f"- run: its folds ran on different machines ({aspect} {said}): pooled as one method, with the "
                     "float differences of the machines in its scores."]
    assert entry["machines"]["differ"] == [aspect] and entry["folds"] == [f"Area_{k}" for k in range(1, 7)]


def test_the_test_machine_is_compared_too(tmp_path, capsys):
    notes, _ = _report(_run(tmp_path, {}, {2: {**CPU, "threads": 2}, 3: {**CPU, "threads": 2}}), tmp_path, capsys)
    assert notes == ["- run: its folds ran on different machines (test CPU threads 1 (Area_1, Area_4..Area_6), "
                     "2 (Area_2, Area_3)): pooled as one method, with the float differences of the machines in its "
                     "scores."]


def test_cpu_threads_of_a_cuda_training_are_not_compared(tmp_path, capsys):
    """On CUDA the math runs on the device: another CPU thread count is no other machine."""
    notes, _ = _report(_run(tmp_path, {k: {**GPU, "threads": k} for k in range(1, 7)}), tmp_path, capsys)
    assert notes == []


def test_a_fold_resumed_on_another_machine_reads_both_in_order(tmp_path, capsys):
    notes, entry = _report(_run(tmp_path, {k: GPU for k in range(1, 6)} | {6: [CPU, GPU]}), tmp_path, capsys)
    assert entry["machines"]["folds"]["Area_6"]["train device"] == "cpu, then cuda (NVIDIA H200)"
    assert len(notes) == 1 and "train device cuda (NVIDIA H200) (Area_1..Area_5), cpu, then cuda (NVIDIA H200) " \
                               "(Area_6)" in notes[0]


def test_a_fold_of_an_older_version_reads_not_recorded(tmp_path, capsys):
    """A metrics.json without the records (an older version), beside folds that have them: nothing says it ran
    alike. One whose checkpoint recorded its thread count alone has that."""
    notes, entry = _report(_run(tmp_path, {1: None, 2: [{"threads": 1}]}, {1: None}), tmp_path, capsys)
    folds = entry["machines"]["folds"]
    assert folds["Area_1"] == {} and folds["Area_2"]["train CPU threads"] == "1"
    assert "train device" not in folds["Area_2"]
    assert len(notes) == 1 and notes[0].startswith("- run: its folds' machines are not all recorded (")
    assert "train device not recorded (Area_1, Area_2), cpu (Area_3..Area_6)" in notes[0]
    assert "train CPU threads not recorded (Area_1), 1 (Area_2..Area_6)" in notes[0]
    assert "test device not recorded (Area_1), cpu (Area_2..Area_6)" in notes[0]


def test_runs_that_record_no_machine_say_nothing(tmp_path, capsys):
    notes, entry = _report(_run(tmp_path, dict.fromkeys(range(1, 7))), tmp_path, capsys)
    assert notes == [] and entry["machines"]["differ"] == []


def test_the_report_reads_the_machines_without_torch(tmp_path):
    run = _run(tmp_path, {4: GPU})
    code = ("import sys; from pathlib import Path; from pointgeope.report import make_report; "
            f"make_report([Path({str(run)!r})], Path({str(tmp_path / 'out')!r})); "
            "assert 'torch' not in sys.modules")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "different machines" in done.stdout


def _notes(tmp_path, capsys, *runs) -> list[str]:
    out = tmp_path / "out2"
    assert cli(["report", *map(str, runs), "--out", str(out)]) == 0
    capsys.readouterr()
    return [line for line in (out / "report.md").read_text().splitlines() if "different machines" in line]


def test_runs_side_by_side_on_other_machines_are_said_to(tmp_path, capsys):
    """A difference between a run trained in bf16 on a GPU and one in float32 on the CPU holds both machines'
    float noise: said in one note; runs alike say nothing."""
    gpu, cpu = _run(tmp_path, dict.fromkeys(range(1, 7), GPU), name="gpu"), _run(tmp_path, {}, name="cpu")
    assert _notes(tmp_path, capsys, gpu, cpu) == [
        "- the runs ran on different machines (train device cuda (NVIDIA H200) (gpu), cpu (cpu); train precision "
        "bf16 (gpu), float32 (cpu); train torch 2.13.0+cu126 (gpu), 2.13.0 (cpu)): their differences hold the float "
        "differences of the machines too."]
    assert _notes(tmp_path, capsys, cpu, _run(tmp_path, {}, name="cpu2")) == []


def test_a_run_whose_folds_differ_reads_so_beside_another(tmp_path, capsys):
    mixed = _run(tmp_path, {2: {**CPU, "threads": 2}}, name="mixed")
    notes = _notes(tmp_path, capsys, _run(tmp_path, {}, name="one"), mixed)
    assert notes[-1] == ("- the runs ran on different machines (train CPU threads 1 (one), differs between its folds "
                         "(mixed)): their differences hold the float differences of the machines too.")


@pytest.mark.parametrize("trained, tested", [
    ("x", 3), ([1, None, "cpu"], []), ([{"device": ["a"], "threads": {"n": 1}}], {"device": None}),
    ([{}], {}), ([{"device": "cuda", "device_name": 7}], {"torch": 2.1}),
])
def test_damaged_records_are_read_as_far_as_they_go_never_a_traceback(tmp_path, capsys, trained, tested):
    """A hand-edited or damaged metrics.json: the report still writes, the machine read as far as it is one."""
    run = _run(tmp_path, {4: None}, {4: None})
    path = run / "area_4" / "metrics.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "trained_on": trained, "tested_on": tested}))
    notes, entry = _report(run, tmp_path, capsys)
    assert len(notes) <= 1 and isinstance(entry["machines"]["folds"]["Area_4"], dict)


def test_folds_that_record_their_machines_in_part_are_not_said_to_have_run_on_other_ones(tmp_path, capsys):
    """Every fold trained on the CPU at 1 thread; fold 1 evaluated by an older version (no record), fold 2's
    training begun by one (its first entry: the thread count alone). Nothing recorded differs, so the note says
    what is not recorded, not that the folds ran on different machines (before: "its folds ran on different
    machines", and report.json's ``differ`` listed every aspect fold 1 lacks)."""
    run = _run(tmp_path, {1: [{"threads": 1}], 2: [{"threads": 1}, CPU]}, {1: None})
    notes, entry = _report(run, tmp_path, capsys)
    assert len(notes) == 1 and "different machines" not in notes[0]
    assert notes[0].startswith("- run: its folds' machines are not all recorded (train device not recorded (Area_1), "
                               "not recorded, then cpu (Area_2), cpu (Area_3..Area_6); ")
    assert notes[0].endswith("): where recorded they agree; nothing says that the parts not recorded ran alike. "
                             "Pooled as one method.")
    assert entry["machines"]["differ"] == []
    assert "test torch" in entry["machines"]["not_recorded"] and "train CPU threads" not in \
        entry["machines"]["not_recorded"]
    other = _run(tmp_path, {}, name="other")
    assert [n for n in _notes(tmp_path, capsys, run, other) if n.startswith("- the runs")] == []


def test_a_real_difference_beside_folds_not_recorded_is_still_said(tmp_path, capsys):
    notes, entry = _report(_run(tmp_path, {1: None, 4: {**CPU, "precision": "bf16"}}, {1: None}), tmp_path, capsys)
    assert len(notes) == 1 and notes[0].startswith("- run: its folds ran on different machines (")
    assert "train precision not recorded (Area_1), float32 (Area_2, Area_3, Area_5, Area_6), bf16 (Area_4)" \
        in notes[0]
    assert entry["machines"]["differ"] == ["train precision"]


def test_a_damaged_value_is_said_on_one_bounded_line_and_marked(tmp_path, capsys):
    """A hand-edited metrics.json whose torch holds a newline, whose device model is a megabyte and whose thread
    count is a list: the note stays one line of report.md, each such value as repr writes it, cut to 64
    characters with its length, marked (looks damaged); the scores are those of the six folds. Before: the values
    verbatim, the newline splitting the note into a second list item ``- injected``."""
    damaged = {**CPU, "torch": "2.13.0\n- injected", "threads": [1, 2]}
    run = _run(tmp_path, {4: damaged}, {5: {**GPU, "device_name": "H" * 10**6}})
    out = tmp_path / "out"
    assert cli(["report", str(run), "--out", str(out)]) == 0
    capsys.readouterr()
    lines = (out / "report.md").read_text().splitlines()
    assert not any(line.startswith("- injected") for line in lines)
    notes = [line for line in lines if "different machines" in line]
    long_name = "'" + "H" * 60 + "... (1,000,002 characters)"
    assert notes == [
        "- run: its folds ran on different machines (train CPU threads 1 (Area_1..Area_3, Area_5, Area_6), [1, 2] "
        "(looks damaged) (Area_4); train torch 2.13.0 (Area_1..Area_3, Area_5, Area_6), '2.13.0\\n- injected' "
        f"(looks damaged) (Area_4); test device cpu (Area_1..Area_4, Area_6), cuda ({long_name} (looks damaged)) "
        "(Area_5); test precision float32 (Area_1..Area_4, Area_6), bf16 (Area_5); test torch 2.13.0 "
        "(Area_1..Area_4, Area_6), 2.13.0+cu126 (Area_5)): pooled as one method, with the float differences of the "
        "machines in its scores."]
    machines = [line for line in lines if line.startswith("- machines: ")]
    assert len(machines) == 1 and "'2.13.0\\n- injected' (looks damaged) (Area_4)" in machines[0]
    entry = json.loads((out / "report.json").read_text())["runs"][0]
    assert entry["machines"]["folds"]["Area_4"]["train torch"] == "'2.13.0\\n- injected' (looks damaged)"
