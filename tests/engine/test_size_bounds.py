"""Every size key of the config has an upper bound that says why, and the memory of the neighbourhoods is
estimated before a training step is made (issue 38, class 7): ``model.neighbours: [100000, ...]`` grew past
3 GB with no epoch after a minute."""
from __future__ import annotations

import dataclasses
import typing

import pytest

from pointgeope.engine.config import Config, ConfigError, load_config
from pointgeope.engine.config_ranges import RANGES
from pointgeope.memory import neighbour_bytes
from tests.engine.conftest import one_line
from tests.engine.test_user_errors import train_args


def _int_keys(cls, prefix=""):
    for name, tp in typing.get_type_hints(cls).items():
        if dataclasses.is_dataclass(tp):
            yield from _int_keys(tp, f"{prefix}{name}.")
        elif int in (tp, *typing.get_args(tp)) or any(int in typing.get_args(a) for a in typing.get_args(tp)):
            yield f"{prefix}{name}"


def test_every_size_key_has_an_upper_bound_with_its_reason():
    keys = list(_int_keys(Config))
    assert {"model.neighbours", "data.voxel_max", "data.batch_size", "eval.batch_points"} <= set(keys)
    unbounded = [k for k in keys if RANGES[k].high is None or not RANGES[k].why]
    assert unbounded == []


def test_neighbours_beyond_the_bound_are_one_line_naming_the_reason():
    """Before: accepted."""
    with pytest.raises(ConfigError) as err:
        load_config(None, ["model.neighbours=[100000, 16, 16, 16, 16]"])
    assert str(err.value) == (
        "override 'model.neighbours=[100000, 16, 16, 16, 16]': model.neighbours[0]: expected an integer "
        "<= 1024, got 100000; the bound is there because every attention layer holds points x k x planes "
        "values (the published network has k = 8 to 16)")


@pytest.mark.parametrize("override, words", [
    ("train.epochs=1" + "0" * 400, "train.epochs: expected an integer <= "),
    ("train.epochs=-1" + "0" * 400, "train.epochs: expected an integer >= 1, got -1000"),
    ("model.geope_base=1" + "0" * 400, "model.geope_base: expected float, got 1000"),
    ("model.geope_base=-1" + "0" * 400, "model.geope_base: expected float, got -1000"),
])
def test_an_integer_beyond_floats_range_is_one_line(override, words):
    """An integer past float's range (YAML reads ``1`` and 400 zeros as an int) is refused by the key's range in
    one line; before: ``OverflowError: int too large to convert to float`` (a traceback, exit 1)."""
    with pytest.raises(ConfigError) as err:
        load_config(None, [override])
    assert words in str(err.value) and "\n" not in str(err.value)


def test_the_neighbourhood_estimate_by_hand():
    """2 samples of 1000 points; stage 0 keeps 1000 points, k 8, 8 channels, 1 + 1 blocks:
    4 B * 2 * 1000 * 8 * 8 * 2 = 1,024,000; stage 1 keeps 250, k 300 clamped to 250, 16 channels, 2 + 1
    blocks: 4 * 2 * 250 * 250 * 16 * 3 = 24,000,000."""
    model = load_config(None, ["model.planes=[8, 16]", "model.strides=[1, 4]", "model.neighbours=[8, 300]",
                               "model.blocks=[1, 2]", "model.decoder_blocks=[1, 1]"]).model
    assert neighbour_bytes(model, 1000, 2) == (25_024_000, 1)


def test_a_step_that_cannot_fit_is_refused_before_it_is_made(tmp_path, capsys, two_folds, monkeypatch):
    monkeypatch.setattr("pointgeope.memory.available_memory", lambda device=None: 10 * 2**20)
    line = one_line(capsys, 2, train_args(two_folds, tmp_path, "model.neighbours=[64, 64]"))
    assert line.startswith("pointgeope train: error: model.neighbours [64, 64]: a training step of 2 samples of "
                           "up to 1,500 points (data.voxel_max) needs at least ")
    assert line.endswith("more than the 0.00977 GiB free on cpu; lower model.neighbours, data.voxel_max or "
                         "data.batch_size")
    assert not (tmp_path / "area_1" / "last.pt").exists()


@pytest.mark.parametrize("value, words", [("0", "--batch-points: eval.batch_points: expected an integer >= 1, got 0"),
                                          ("1000000000000", "expected an integer <= 2147483647, got 1000000000000")])
def test_predict_batch_points_has_the_keys_range(value, words, tiny_run, tmp_path, capsys):
    """Before: --batch-points 10^12 went into the run's config without the range a config gets."""
    line = one_line(capsys, 2, ["predict", str(tiny_run), str(tmp_path / "x.npy"), "--out", str(tmp_path / "o"),
                                "--batch-points", value])
    assert words in line, line


def test_synth_rooms_per_area_has_a_bound(tmp_path, capsys):
    """Before: --rooms-per-area 100000000 planned rooms for minutes without writing one."""
    line = one_line(capsys, 2, ["synth", str(tmp_path / "s"), "--rooms-per-area", "100000000"])
    assert line.startswith("pointgeope synth: error: expected --rooms-per-area from 1 to 1000, got 100000000"), line

