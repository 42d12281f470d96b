"""The examples in examples/ run and do what their docstrings say (a few steps, small settings)."""
from __future__ import annotations

import importlib.util
import math

import pytest
import torch

from tests.conftest import REPO


def load(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def one_thread():
    """The examples' small batches gain nothing from more threads (which spin on a busy machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_pyg_point_transformer_trains_with_rpe_and_geope(capsys, one_thread):
    losses = load("pyg_point_transformer").main(steps=6)
    assert set(losses) == {"rpe", "geope"}
    for pe, run in losses.items():
        assert len(run) == 6 and all(math.isfinite(v) for v in run)
        assert run[-1] < run[0] - 0.2, f"{pe}: {run}"                      # it learns
    assert losses["rpe"] != losses["geope"]                                  # the encodings differ
    out = capsys.readouterr().out
    assert "one synthetic office: " in out and "pe=geope  loss at steps 1, 2, 4, 6:" in out
