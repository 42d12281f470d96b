"""bench_hierarchy_checkouts: its JSON says what produced it (commit, package versions, load) and a side whose
process imported another tree's package stops the run (both sides would time one code and read as equal)."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

import bench_hierarchy_checkouts as bench

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")


def _fake_side(times, package_of=None):
    """``run_side`` without a process: each call's next time, the side's tree as its package, one hash."""
    calls = iter(times)

    def run_side(tree, clouds, args):
        package = package_of(tree) if package_of else tree / "pointgeope"
        return {"cpu_seconds": next(calls), "sha256": "same", "package": str(package)}
    return run_side


def _main(monkeypatch, tmp_path, run_side):
    out = tmp_path / "checkouts.json"
    monkeypatch.setattr(bench, "run_side", run_side)
    monkeypatch.setattr(sys, "argv", ["bench_hierarchy_checkouts.py", "--base-ref", "HEAD", "--out", str(out),
                                      "--clouds", "1", "--rounds", "2"])
    bench.main()
    return json.loads(out.read_text())


def test_the_json_carries_the_provenance_the_load_and_the_pairing(monkeypatch, tmp_path):
    # rounds alternate: base, new; new, base -> base 2.0, 4.0 and new 1.0, 3.0: ratios 0.5, 0.75
    got = _main(monkeypatch, tmp_path, _fake_side([2.0, 1.0, 3.0, 4.0]))
    prov = got["provenance"]
    assert prov["threads"] == 1 and set(prov["versions"]) == {"numpy", "torch", "numba", "pykdtree"}
    assert len(prov["commit"]) == 40 and isinstance(prov["load_average_1min"], float)
    case = got["cases"]["1x80000"]
    assert len(case["load_average_end"]) == 3 and case["identical"] is True
    assert case["new"]["all_cpu_seconds"] == [1.0, 3.0] and case["base"]["all_cpu_seconds"] == [2.0, 4.0]
    assert case["new"]["paired_median"] == 0.625 and case["new"]["paired_range"] == [0.5, 0.75]
    assert len(case["packages"]) == 2


def test_a_side_that_imports_another_trees_package_stops_the_run(monkeypatch, tmp_path):
    installed = Path("/somewhere/else/site-packages/pointgeope")
    with pytest.raises(SystemExit, match="to import pointgeope from it, got /somewhere/else"):
        _main(monkeypatch, tmp_path, _fake_side([1.0] * 4, package_of=lambda tree: installed))
    assert not (tmp_path / "checkouts.json").exists()
