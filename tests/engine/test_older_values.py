"""Tests of a config value in an older version's form (pointgeope/engine/record_keys.py: OLDER_VALUES):
``data.augment`` was a yes/no before its augmentations were named. A run folder of that time records
``augment: true`` or ``false`` in its config.yaml and checkpoints; the fixtures below write that record by hand
(today's demo config with the boolean in place of the name), as the first versions wrote it."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pointgeope.engine.checkpoint import fold_config, save_checkpoint
from pointgeope.engine.config import ConfigError, config_from_dict, config_to_dict, load_config, load_record
from pointgeope.engine.config_diff import config_differences
from pointgeope.engine.record_keys import as_recorded
from pointgeope.errors import UserError

REPO = Path(__file__).resolve().parents[2]


def older_record(augment: bool) -> dict:
    """The demo's resolved config as a version before the augmentations were named saved it."""
    record = config_to_dict(load_config(REPO / "configs/demo.yaml"))
    record["data"]["augment"] = augment
    return record


def test_no_augmentation_then_is_none_now_wherever_the_record_is_read(tmp_path):
    """``augment: false`` made no augmentation, as ``none`` does: evaluate and predict read the run (its
    config.yaml, its checkpoint's config), and a resume with ``none`` is no other config."""
    old = older_record(False)
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old))
    assert load_record(tmp_path / "config.yaml").data.augment == "none"
    assert config_from_dict(old, "last.pt").data.augment == "none"
    now = config_to_dict(load_config(REPO / "configs/demo.yaml", ["data.augment=none"]))
    assert config_differences(old, now) == []
    assert as_recorded(old)["data"]["augment"] == "none" and old["data"]["augment"] is False


def test_the_augmentations_of_then_are_refused_in_one_line_that_says_what_to_do(tmp_path):
    """``augment: true`` made PTv1's augmentations of then (colour jitter 0.05, no hue or saturation shift),
    which no value of today's makes: reading the run is refused naming the file's line, the value, today's
    values and what to do, not 'expected one of ...' alone."""
    fold = tmp_path / "area_1"
    fold.mkdir()
    (fold / "config.yaml").write_text(yaml.safe_dump(older_record(True), sort_keys=False))
    with pytest.raises(ConfigError) as caught:
        fold_config(fold)
    line = str(caught.value)
    assert "\n" not in line
    assert line.startswith(f"{(fold / 'config.yaml').resolve()}:")
    assert ": data.augment: true is an older version's" in line
    assert "'ptv1', 'pointcept', 'none', 'pointcept_ptv3'" in line and "train --force" in line
    (fold / "config.yaml").unlink()
    save_checkpoint(fold / "last.pt", {"config": older_record(True)})
    with pytest.raises(UserError, match=r"last\.pt: .*data\.augment: true is an older version's setting"):
        fold_config(fold, log=lambda line: None)
    assert as_recorded(older_record(True))["data"]["augment"] is True        # a report still compares it as it ran


def test_one_is_not_the_older_yes(tmp_path):
    """Only the booleans are the older form: ``augment: 1`` is a mistake of today's, said as before."""
    record = older_record(False)
    record["data"]["augment"] = 1
    with pytest.raises(ConfigError, match=r"data\.augment: expected one of 'ptv1'.*got 1$"):
        config_from_dict(record, "last.pt")


def test_evaluate_of_such_a_run_exits_2_with_the_line(tmp_path, capsys):
    """The command (``pointgeope evaluate``, in this process): exit code 2 and the one line, no traceback."""
    from pointgeope.cli import main as cli

    fold = tmp_path / "run" / "area_1"
    fold.mkdir(parents=True)
    (fold / "config.yaml").write_text(yaml.safe_dump(older_record(True), sort_keys=False))
    save_checkpoint(fold / "last.pt", {"config": older_record(True)})
    assert cli(["evaluate", str(fold)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "data.augment: true is an older version's setting" in err.strip().splitlines()[-1]


def test_a_resume_of_such_a_run_says_why_no_config_of_today_resumes_it(tmp_path):
    """A resume with today's config differs in data.augment (True, now 'ptv1'): the refusal says that True is
    an older version's setting which no value of today's makes, as a user cannot write it in a config."""
    from pointgeope.engine.checkpoint import CheckpointError, load_checkpoint

    save_checkpoint(tmp_path / "last.pt", {"config": older_record(True)})
    now = config_to_dict(load_config(REPO / "configs/demo.yaml"))
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(tmp_path / "last.pt", now)
    line = str(caught.value)
    assert "data.augment: checkpoint True, now 'ptv1'" in line and "\n" not in line
    assert "data.augment: true is an older version's setting (PTv1's augmentations as made then" in line
    assert "which no value of today's makes" in line
