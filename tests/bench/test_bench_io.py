"""Tests of bench/bench_io.py's provenance: the commit and dirty flag of a real (temporary) git checkout,
the versions and threads recorded, and where a smoke run writes."""
from __future__ import annotations

import bench_io


def test_git_state_clean_then_dirty_then_staged(checkout, git):
    head = git(checkout, "rev-parse", "HEAD")
    assert bench_io.git_state(checkout) == {"commit": head, "dirty": False, "changed": []}
    (checkout / "new.txt").write_text("untracked\n")            # untracked: not counted
    assert bench_io.git_state(checkout)["dirty"] is False
    (checkout / "code.py").write_text("x = 2\n")
    state = bench_io.git_state(checkout)
    assert state["commit"] == head and state["dirty"] is True and state["changed"] == [" M code.py"]
    git(checkout, "add", "code.py")                             # staged, not committed: still dirty
    assert bench_io.git_state(checkout)["changed"] == ["M  code.py"]
    git(checkout, "commit", "-q", "-m", "two")
    assert bench_io.git_state(checkout) == {"commit": git(checkout, "rev-parse", "HEAD"), "dirty": False,
                                            "changed": []}


def test_git_commit_unchanged_for_its_callers(checkout, git):
    head = git(checkout, "rev-parse", "HEAD")
    assert bench_io.git_commit(tree=checkout) == head
    assert bench_io.git_commit(short=True, tree=checkout) == git(checkout, "rev-parse", "--short", "HEAD")


def test_outside_a_checkout(tmp_path, checkout):
    assert bench_io.git_commit(tree=tmp_path) == ""
    (checkout / "inner").mkdir()             # a folder inside a checkout is not a checkout (as metrics.json's)
    assert bench_io.git_commit(tree=checkout / "inner") == ""
    assert bench_io.git_state(tmp_path) == {"commit": "", "dirty": None, "changed": []}
    # nor its state: no commit and a "clean" flag of only that folder (a wheel's site-packages in a clone's venv)
    assert bench_io.git_state(checkout / "inner") == {"commit": "", "dirty": None, "changed": []}
    assert bench_io.tree_dirty(checkout / "inner") is None


def test_provenance_records_threads_and_versions(git):
    import numpy
    import torch

    got = bench_io.provenance([1, 2], packages=("numpy", "torch", "no-such-package-pointgeope"))
    assert got["threads"] == [1, 2]
    assert got["versions"]["numpy"] == numpy.__version__
    assert got["versions"]["torch"] == torch.__version__
    assert got["versions"]["no-such-package-pointgeope"] is None
    assert got["commit"] == bench_io.git_commit() and isinstance(got["dirty"], bool)


def test_out_path_keeps_committed_files_from_smoke_runs(tmp_path):
    committed = tmp_path / "results" / "bench_x.json"
    assert bench_io.out_path(None, committed, smoke=False) == committed
    assert bench_io.out_path(tmp_path / "mine.json", committed, smoke=True) == tmp_path / "mine.json"
    smoke = bench_io.out_path(None, committed, smoke=True)
    assert smoke.name == "bench_x.json" and smoke.parent != committed.parent and smoke.parent.is_dir()


def test_provenance_is_dirty_for_the_code_not_for_the_benches_own_results(checkout, git):
    """A CPU bench rewrites a committed result under bench/results: the next run's provenance is still clean
    (as the GPU record's ``dirty``); a change of the code measured makes it dirty."""
    results = checkout / "bench" / "results"
    results.mkdir(parents=True)
    (results / "bench_x.json").write_text("{}\n")
    git(checkout, "add", "-A")
    git(checkout, "commit", "-q", "-m", "a result")
    (results / "bench_x.json").write_text('{"rows": []}\n')                 # the first run's output
    got = bench_io.provenance(1, tree=checkout)
    assert (got["dirty"], got["changed"]) == (False, [])
    assert bench_io.git_state(checkout)["changed"] == [" M bench/results/bench_x.json"]   # git sees it
    (checkout / "code.py").write_text("x = 2\n")
    got = bench_io.provenance(1, tree=checkout)
    assert (got["dirty"], got["changed"]) == (True, [" M code.py"])


def test_tree_dirty_is_the_provenances_dirty(checkout, git):
    """The scripts that record ``commit`` beside their own keys record ``dirty`` by the same rule as
    :func:`bench_io.provenance`: a rewritten result under bench/results is clean, a changed code file not."""
    results = checkout / "bench" / "results"
    results.mkdir(parents=True)
    (results / "bench_x.json").write_text("{}\n")
    git(checkout, "add", "-A")
    git(checkout, "commit", "-q", "-m", "a result")
    (results / "bench_x.json").write_text('{"rows": []}\n')
    assert bench_io.tree_dirty(checkout) is False
    (checkout / "code.py").write_text("x = 2\n")
    assert bench_io.tree_dirty(checkout) is True


def test_tree_dirty_outside_a_checkout_is_unknown(tmp_path):
    assert bench_io.tree_dirty(tmp_path) is None


def test_cpu_model_names_the_model_and_counts_its_cpus(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Test CPU 9000\n\nprocessor\t: 1\nmodel name\t: Test CPU 9000\n")
    assert bench_io.cpu_model(info) == "Test CPU 9000 x 2"
    info.write_text("processor\t: 0\nHardware\t: something\n")        # no model name line (some ARM hosts)
    assert bench_io.cpu_model(info) == ""
    assert bench_io.cpu_model(tmp_path / "absent") == ""


def test_provenance_carries_the_cpu_model(monkeypatch, tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("model name\t: Test CPU 9000\n")
    monkeypatch.setattr(bench_io.cpu_model, "__defaults__", (info,))
    assert bench_io.provenance(1)["cpu_model"] == "Test CPU 9000 x 1"


def test_provenance_records_the_checkout_of_the_imported_package_by_default(checkout, git):
    """A bench times the ``pointgeope`` it imports, which ``PYTHONPATH`` (or an editable install elsewhere) may take
    from another checkout than the one the script sits in: ``provenance()`` records that checkout's commit and
    changes (``pointgeope.provenance.PACKAGE_PARENT``), not this repository's."""
    import json
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    import pointgeope

    shutil.copytree(Path(pointgeope.__file__).parent, checkout / "pointgeope",
                    ignore=shutil.ignore_patterns("__pycache__"))
    git(checkout, "add", "-A")
    git(checkout, "commit", "-q", "-m", "the package")
    (checkout / "pointgeope" / "constants.py").write_text("changed = True\n")      # a change of the code timed
    code = (f"import sys, json; sys.path.insert(0, {str(bench_io.ROOT / 'bench')!r}); import bench_io, pointgeope; "
            "print(json.dumps([pointgeope.__file__, bench_io.provenance(1, ())]))")
    env = dict(os.environ, PYTHONPATH=str(checkout))
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=checkout, capture_output=True, text=True,
                          check=True)
    package, got = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(package).parent == checkout / "pointgeope"
    assert (got["commit"], got["dirty"]) == (git(checkout, "rev-parse", "HEAD"), True) != (bench_io.git_commit(), True)
    assert got["changed"] == [" M pointgeope/constants.py"]
