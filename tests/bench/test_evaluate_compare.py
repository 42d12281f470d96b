"""bench_evaluate.py --compare with its subprocesses faked: the cases rotate round by round, each case is
paired with the first checkout's run of the same round and threads, both trees' commits are recorded, and
every case tests the one room file this checkout wrote (an older checkout, without synth_room, too)."""
from __future__ import annotations

import argparse
import json
import subprocess
import types
from pathlib import Path

import bench_evaluate
import bench_io

# seconds per room of each (checkout, threads) in rounds 0, 1, 2
SECONDS = {("base", "2"): [10.0, 20.0, 10.0], ("new", "2"): [15.0, 10.0, 30.0],
           ("base", "1"): [4.0, 4.0, 8.0], ("new", "1"): [2.0, 4.0, 4.0]}


def test_compare_pairs_rounds_and_records_trees(tmp_path, monkeypatch):
    base, new = Path(bench_io.ROOT), tmp_path / "new"          # this checkout, and a folder outside git
    new.mkdir()
    name = {str(base): "base", str(new): "new"}
    calls, rooms, real_run = [], set(), subprocess.run

    def fake_run(cmd, env=None, **kwargs):
        if cmd[0] == "git":                                     # bench_io.git_state: the real git
            return real_run(cmd, env=env, **kwargs)
        key = (name[env["PYTHONPATH"]], cmd[cmd.index("--threads") + 1])
        calls.append(key)
        room = Path(cmd[cmd.index("--room") + 1])              # one room file for every checkout, still there
        rooms.add(room)
        assert room.is_file()
        seconds = SECONDS[key][sum(1 for c in calls if c == key) - 1]
        return types.SimpleNamespace(stdout="log line\n" + json.dumps({"seconds_per_room": seconds}) + "\n")

    monkeypatch.setattr(subprocess, "run", fake_run)
    args = argparse.Namespace(compare=[base, new], thread_counts=[2, 1], variants=["auto"], rounds=3, size="tiny",
                              config="c.yaml", device="cpu", set=[])
    out = bench_evaluate.compare(args)
    order = [("base", "2"), ("new", "2"), ("base", "1"), ("new", "1")]
    assert calls == order + order[1:] + order[:1] + order[2:] + order[:2]
    assert len(rooms) == 1 and not rooms.pop().exists()                # written once, removed at the end
    rows = {(name[r["checkout"]], t): r for r, t in zip(out["rows"], (2, 2, 1, 1), strict=True)}
    assert rows[("new", 2)]["seconds_rounds"] == [15.0, 10.0, 30.0]
    assert rows[("new", 2)]["paired_ratios"] == [1.5, 0.5, 3.0]
    assert rows[("new", 2)]["paired_median"] == 1.5 and rows[("new", 2)]["paired_range"] == [0.5, 3.0]
    assert rows[("new", 2)]["ratio_to_first"] == 1.0                  # minima 10 / 10: not the paired answer
    assert rows[("new", 1)]["paired_ratios"] == [0.5, 1.0, 0.5] and rows[("new", 1)]["paired_median"] == 0.5
    assert rows[("base", 1)]["paired_median"] == 1.0
    assert out["trees"][str(base)]["commit"] == bench_io.git_commit()
    assert out["trees"][str(new)] == {"commit": "", "dirty": None, "changed": []}


def test_an_older_checkouts_case_gets_no_normals_and_the_recipes_gets_the_rooms():
    """``--compare``'s baseline may predate ``data.normal``: its config has no such key and its ``vote_room`` no
    ``normal`` argument, so the case passes nothing; a ``[rgb | normal]`` config gets the room's normals (those
    of a flat floor: +z)."""
    import types

    import numpy as np

    from evaluate_published import case_normals
    from pointgeope.engine.config import load_config

    rng = np.random.default_rng(0)
    floor = np.c_[rng.random((500, 2)) * 4, np.zeros(500)].astype(np.float32)
    older = types.SimpleNamespace(data=types.SimpleNamespace(grid_size=0.04, color=True, height=False))
    assert case_normals(older, floor) == {}
    assert case_normals(load_config(Path(bench_io.ROOT) / "configs/s3dis/pt_geope.yaml"), floor) == {}
    normal = case_normals(load_config(Path(bench_io.ROOT) / "configs/demo_ptv3.yaml"), floor)["normal"]
    np.testing.assert_allclose(normal, np.tile([0.0, 0.0, 1.0], (500, 1)), atol=1e-6)
