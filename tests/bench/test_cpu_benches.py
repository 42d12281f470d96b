"""The CPU benches' summaries: bench_synth_write's speed-ups are savetxt's time over each method's per round,
from the unrounded times; bench_voxelize's speed-up is the paired summary of baseline against ours."""
from __future__ import annotations

import json
import sys

import pytest

import bench_synth_write
import bench_voxelize


def test_synth_write_speedup_is_the_median_of_the_per_round_quotients():
    # per round savetxt / vectorised: 8, 6, 8, 3 -> median 7 (even rounds: the mean of 6 and 8); inverting the
    # 4-digit ratios vectorised / savetxt gave 6.9994, and the median of inverses is not the inverse median
    times = {"savetxt": [8.0, 9.0, 10.0, 6.0], "percent": [9.0, 9.0, 9.0, 9.0], "vectorised": [1.0, 1.5, 1.25, 2.0]}
    got = bench_synth_write.speedup(times, "vectorised")
    assert got == {"paired_median": 7.0, "paired_range": [3.0, 8.0], "ratio_of_mins": 6.0}
    assert bench_synth_write.speedup(times, "savetxt") == {"paired_median": 1.0, "paired_range": [1.0, 1.0],
                                                          "ratio_of_mins": 1.0}


def test_synth_write_run_gives_each_methods_seconds_per_round():
    xyz_mm, rgb = bench_synth_write.room(500)
    times = bench_synth_write.run(xyz_mm, rgb, bench_synth_write.savetxt(xyz_mm, rgb), reps=3)
    for clock in ("wall", "cpu"):
        assert list(times[clock]) == list(bench_synth_write.METHODS)
        assert all(len(t) == 3 and min(t) >= 0 for t in times[clock].values())


def test_voxelize_quick_run_records_the_speedup_once(monkeypatch, tmp_path, capsys):
    out = tmp_path / "voxelize.json"
    monkeypatch.setattr(sys, "argv", ["bench_voxelize.py", "--quick", "--out", str(out)])
    assert bench_voxelize.main() == 0
    (row,) = json.loads(out.read_text())["rows"]
    assert "speedup_cpu" not in row and row["threads"] == 1 and row["points"] == 250_000
    assert "single-threaded" in json.loads(out.read_text())["threads_note"]
    sp = row["cpu"]["baseline"]                   # baseline / ours per round, 2 rounds
    assert sp["paired_median"] == pytest.approx(sum(sp["paired_ratios"]) / 2, abs=1e-4)
    assert sp["paired_range"] == sorted(sp["paired_ratios"]) and row["cpu"]["ours"]["paired_ratios"] == [1.0, 1.0]
    assert f"{sp['paired_median']:>9.1f}x [{sp['paired_range'][0]:.1f}-" in capsys.readouterr().out


def test_synth_write_times_one_thread_by_default_and_says_why(monkeypatch, tmp_path, capsys):
    """The formatters are single-threaded: a default run has one thread setting, and the JSON says why; each
    line says "1 thread" (it said "1 thread(s)")."""
    out = tmp_path / "synth.json"
    monkeypatch.setattr(sys, "argv", ["bench_synth_write.py", "--points", "2000", "--reps", "2", "--out", str(out)])
    bench_synth_write.main()
    got = json.loads(out.read_text())
    assert [run["threads"] for run in got["runs"]] == [1] and got["provenance"]["threads"] == [1]
    assert "single-threaded" in got["threads_note"]
    lines = [line for line in capsys.readouterr().out.splitlines() if "savetxt" in line and "Mpoints/s" in line]
    assert lines and all(line.startswith("1 thread ") for line in lines), lines
    speed = got["runs"][0]["results"]["vectorised"]["speedup_vs_savetxt"]
    assert speed["paired_range"][0] <= speed["paired_median"] <= speed["paired_range"][1]


def test_confusion_quick_run_times_the_update_beside_bincount_and_keeps_other_labels(monkeypatch, tmp_path):
    """bench_confusion: each side's paired ratio to bincount over the rounds (bincount's own 1.0), a run
    stored under its --label beside the runs already in --out; the two sides count alike (checked first)."""
    import bench_confusion

    out = tmp_path / "confusion.json"
    out.write_text(json.dumps({"benchmark": "bench_confusion", "runs": {"before": {"rows": []}}}))
    monkeypatch.setattr(sys, "argv", ["bench_confusion.py", "--quick", "--label", "after", "--out", str(out)])
    assert bench_confusion.main() == 0
    runs = json.loads(out.read_text())["runs"]
    assert set(runs) == {"before", "after"}
    (row,) = runs["after"]["rows"]
    assert row["threads"] == 1 and runs["after"]["points"] == 200_000
    assert row["cpu"]["bincount"]["paired_ratios"] == [1.0, 1.0]
    side = row["cpu"]["update"]
    assert side["paired_range"] == sorted(side["paired_ratios"]) and len(side["paired_ratios"]) == 2


def test_pyg_layer_refuses_two_compared_files_of_one_name(monkeypatch, tmp_path, capsys):
    # a case is named by its file's stem: a/conv.py and b/conv.py would time one layer as "<pe> @conv" and
    # record a/conv.py as the file of what b/conv.py measured
    import bench_pyg_layer

    files = [tmp_path / d / "conv.py" for d in ("a", "b")]
    for f in files:
        f.parent.mkdir()
        f.write_text("raise AssertionError('not loaded: refused before')\n")
    monkeypatch.setattr(sys, "argv", ["bench_pyg_layer.py", "--compare", *map(str, files)])
    with pytest.raises(SystemExit) as exit_info:
        bench_pyg_layer.main()
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit_info.value.code == 2
    assert "--compare: expected files of distinct names" in err and f"{files[0]}, {files[1]}" in err
    assert "/tmp/conv_2.py" in err


def test_checksum_quick_run_scales_each_sides_median_round_to_100_mb(monkeypatch, tmp_path):
    import bench_checksum

    out = tmp_path / "checksum.json"
    monkeypatch.setattr(sys, "argv", ["bench_checksum.py", "--mb", "2", "--reps", "3", "--out", str(out)])
    assert bench_checksum.main() == 0
    got = json.loads(out.read_text())
    assert got["provenance"]["threads"] == 1 and got["mb"] == 2
    for side in ("file_checksum", "sha256_in_memory"):
        seconds = sorted(got[side]["seconds"])             # 3 rounds: the median is the middle one
        assert len(seconds) == 3 and got[side]["seconds_per_100mb"] == pytest.approx(seconds[1] * 50, abs=1e-4)
        assert got[side]["fastest_per_100mb"] == pytest.approx(seconds[0] * 50, abs=1e-4)
        assert got[side]["gb_per_s"] == pytest.approx(0.002 / seconds[1], abs=6e-4)  # rounded to 3 digits
