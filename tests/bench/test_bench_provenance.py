"""The benchmarks that wrote their own machine fields (``commit``, ``machine`` as ``platform.platform()`` or the
processor's name, ``processor``, ``torch``) record bench_io's ``provenance`` as every other one does: one owner,
the CPU model and the commit state included. A quick run of each, in this process."""
from __future__ import annotations

import json
import sys
from importlib import metadata

import pytest

import bench_io

RUNS = {
    "bench_qk_encodings": ["--rounds", "1", "--threads", "1", "--heads", "1", "--head-dims", "16", "--points", "128",
                           "--patch", "64", "--skip-attention"],
    "bench_pyg_layer": ["--threads", "1", "--reps", "1", "--n", "200", "--k", "4", "--channels", "8", "--pe", "rpe"],
    "bench_ptv3_step": ["--rounds", "1", "--threads", "1", "--points", "300"],
}


@pytest.mark.parametrize("name", list(RUNS))
def test_a_quick_run_records_bench_ios_provenance_and_no_machine_of_its_own(name, monkeypatch, tmp_path):
    module = __import__(name)
    out = tmp_path / f"{name}.json"
    monkeypatch.setattr(sys, "argv", [f"{name}.py", *RUNS[name], "--out", str(out)])
    module.main()
    got = json.loads(out.read_text())
    assert not {"machine", "processor", "cpus", "commit", "dirty", "torch"} & set(got), sorted(got)
    prov = got["provenance"]
    assert prov["commit"] == bench_io.git_commit() and isinstance(prov["dirty"], bool)
    assert prov["cpu_model"] == bench_io.cpu_model() and prov["threads"] == [1]
    assert prov["versions"]["torch"] == metadata.version("torch")
