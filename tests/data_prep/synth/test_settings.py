"""`pointgeope synth` checks its settings before it records or allocates anything (issue 38, classes 5
and 6): a refused command leaves OUT as it was, and a density whose rooms would not fit in memory is
refused from an estimate before any point is drawn."""
from __future__ import annotations

import numpy as np
import pytest

from data_prep.synth.config import PRESETS
from data_prep.synth.dataset import BYTES_PER_POINT, area_layouts, largest_room_points, plan_rooms, sample_room
from pointgeope.cli import main as cli


def test_a_refused_command_records_nothing(tmp_path, capsys):
    """Before: `synth sx --seed -1` failed after writing its settings file, and then `synth sx --size tiny`
    was refused as "generated with other settings"."""
    out = tmp_path / "sx"
    assert cli(["synth", str(out), "--seed", "-1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "seed" in err[0] and "-1" in err[0], err
    assert not out.exists() or not any(out.iterdir())
    assert cli(["synth", str(out), "--size", "tiny", "--areas", "1", "--rooms-per-area", "1"]) == 0


def test_a_folder_holding_only_the_settings_of_an_attempt_is_new(tmp_path, capsys):
    """An attempt killed before its first room (settings written, nothing else) loses nothing: another
    command may start there."""
    out = tmp_path / "sx"
    out.mkdir()
    (out / ".synth_settings.json").write_text('{"seed": 5}')
    assert cli(["synth", str(out), "--size", "tiny", "--areas", "1", "--rooms-per-area", "1"]) == 0


def test_the_largest_room_estimate_is_the_count_sampling_gives():
    """The estimate counts what sample_room draws before it drops the points inside solid objects: an
    upper bound, within those dropped points of the true count."""
    config = PRESETS["tiny"]
    specs = plan_rooms(2, 2)
    drawn = max(len(sample_room(s, lay, config.density, 0.0, config.min_points, 0).xyz_mm)
                for a in range(2) for s, lay in zip([s for s in specs if s.area == a],
                                                    area_layouts([s for s in specs if s.area == a], 0, None),
                                                    strict=True))
    estimate = largest_room_points(specs, 0, None, config.density, config.min_points)
    assert drawn <= estimate <= 1.3 * drawn


@pytest.mark.parametrize("density", ["1e9", "1e30", "1e308", "inf", "nan"])
def test_a_density_beyond_memory_is_refused_before_allocating(density, tmp_path, capsys):
    """Before: --density 1e9 tried a 200 GiB allocation and ended in numpy's MemoryError traceback; 1e308 made a
    room's point count infinite, an OverflowError traceback of the memory estimate."""
    out = tmp_path / "sx"
    assert cli(["synth", str(out), "--density", density]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("pointgeope synth: error: ") and "density" in err[0], err
    if density == "1e9":
        assert f"{BYTES_PER_POINT} B a point" in err[0] and "at most --density" in err[0], err
    assert not out.exists() or not any(out.iterdir())
    assert np.isfinite(BYTES_PER_POINT)


@pytest.mark.parametrize("noise", ["0.1", "-0.001", "nan"])
def test_a_noise_out_of_range_names_the_open_bound(noise, tmp_path, capsys):
    """Before: `--noise 0.1` said "expected a noise of 0 to 0.1 m, got 0.1", a range that holds it."""
    assert cli(["synth", str(tmp_path / "sx"), "--noise", noise]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"pointgeope synth: error: expected --noise >= 0 and < 0.1 m (a tenth of a metre is no scanner's "
                   f"noise), got {float(noise)}"], err
