"""Tests of pointgeope/engine/config_override.py: a text key's override (and so ``--run-dir``, ``--data-root``)
takes its value as it is, every other key's is read as YAML."""
from __future__ import annotations

import os

import pytest

from pointgeope.commands import config_overrides
from pointgeope.engine.config import Config, ConfigError, load_config
from pointgeope.engine.config_override import key_type, parse_override

# folder names that YAML reads as something else: a comment, a date, an int, a bool, null, a list, a mapping,
# an alias, a float, a tag
FOLDERS = ["runs/exp #2", "2024-01-01", "0001", "yes", "~", "[a]", "runs: x", "*x", "1e5", "!tag", "off"]


@pytest.mark.parametrize("folder", FOLDERS)
def test_run_dir_and_data_root_options_take_any_folder_name_as_it_is(folder):
    """``--run-dir "runs/exp #2"`` wrote to runs/exp (YAML read " #2" as a comment); ``--run-dir 2024-01-01``
    was refused as a date (and 0001 as the number 1, yes as true, ~ as null)."""
    overrides = config_overrides([], {"--data-root": ("data.root", folder), "--run-dir": ("train.run_dir", folder)},
                                 say=print)
    cfg = load_config(None, overrides)
    assert (cfg.data.root, cfg.train.run_dir) == (os.path.expanduser(folder),) * 2   # ~ is the home folder


def test_a_text_keys_override_keeps_everything_after_the_first_equals_sign():
    assert parse_override("data.root=/data/a=b #1", Config) == {"data": {"root": "/data/a=b #1"}}
    assert load_config(None, ["train.device=cuda:1"]).train.device == "cuda:1"
    assert load_config(None, ["train.run_dir = runs/x y "]).train.run_dir == "runs/x y"   # as YAML, no outer spaces


def test_other_keys_are_still_read_as_yaml():
    cfg = load_config(None, ["optim.lr=1e-3", "data.voxel_max=null", "eval.tta.flips=yes",
                             "model.planes=[32, 64, 128, 256, 512] # the published widths"])
    assert (cfg.optim.lr, cfg.data.voxel_max, cfg.eval.tta.flips) == (0.001, None, True)
    assert cfg.model.planes == [32, 64, 128, 256, 512]


@pytest.mark.parametrize("text, match", [
    ("train.run_dir=", r"train.run_dir: expected str, got None"),           # an empty value is not a folder
    ("train.device=cuda #1", r"train.device: expected auto, cpu, cuda or cuda:N"),  # checked as it is
    ("train.run_dirr=x", r"unknown key 'train.run_dirr'; did you mean 'train.run_dir'"),
])
def test_a_text_key_is_still_checked(text, match):
    with pytest.raises(ConfigError, match=match):
        load_config(None, [text])


def test_key_type_follows_the_dataclasses():
    assert key_type(Config, ["train", "run_dir"]) is str
    assert key_type(Config, ["eval", "tta", "flips"]) is bool
    assert key_type(Config, ["train", "nothing"]) is None and key_type(Config, ["optim", "lr", "x"]) is None


def test_each_ablation_trial_keeps_its_own_folder_under_any_run_dir(tmp_path):
    """ablate --run-dir "runs/abl #1" gave every trial train.run_dir=runs/abl (the rest read as a comment)."""
    from pointgeope.engine.ablation import Trial

    run = tmp_path / "abl #1"
    trials = [Trial(p, s, run / p / f"seed_{s}") for p in ("rpe", "geope") for s in (0, 1)]
    dirs = [load_config(None, t.overrides([])).train.run_dir for t in trials]
    assert dirs == [str(t.folder) for t in trials]


def test_a_folder_from_home_is_the_home_folders_as_in_a_shell(tmp_path, monkeypatch):
    """run_dir: ~/runs/x in a config file (no shell expands it) made a folder named ~ in the current folder."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    config = tmp_path / "c.yaml"
    config.write_text("data:\n  root: ~/s3dis\ntrain:\n  run_dir: ~/runs/x\n")
    cfg = load_config(config)
    home = tmp_path / "home"
    assert (cfg.data.root, cfg.train.run_dir) == (str(home / "s3dis"), str(home / "runs" / "x"))
    assert load_config(None, ["train.run_dir=~/r"]).train.run_dir == str(home / "r")
    assert load_config(None, ["train.run_dir=runs/~x"]).train.run_dir == "runs/~x"   # only a leading ~
    home.mkdir()
    (home / "mine.yaml").write_text("train:\n  epochs: 7\n")
    (tmp_path / "top.yaml").write_text("base: ~/mine.yaml\n")             # a base: from home, too
    assert load_config(tmp_path / "top.yaml").train.epochs == 7
    assert load_config("~/mine.yaml").train.epochs == 7                   # --config=~/mine.yaml, which zsh leaves



def test_a_text_keys_override_quoted_as_yaml_is_the_text_inside_the_quotes():
    """``"train.run_dir='runs/x'"`` (the value quoted for YAML, as every override's value was read) named the folder
    runs/x; taken as it is, it trained into a folder named ``'runs`` in the current one."""
    cfg = load_config(None, ["train.run_dir='runs/exp #1'", 'data.root="/data/s3dis"', "train.device='cpu'"])
    assert (cfg.train.run_dir, cfg.data.root, cfg.train.device) == ("runs/exp #1", "/data/s3dis", "cpu")
    assert load_config(None, ["train.run_dir='it''s'"]).train.run_dir == "it's"          # YAML's own escape
    assert load_config(None, ["train.run_dir='a"]).train.run_dir == "'a"                 # one quote: a name
    assert load_config(None, ["train.run_dir='a\u00a0b'"]).train.run_dir == "a\u00a0b"     # any character inside
    assert load_config(None, ["train.run_dir='a' and 'b'"]).train.run_dir == "'a' and 'b'"


def test_an_override_of_a_whole_section_says_to_set_one_key():
    """'eval.tta=' was answered with a file's hint: "got nothing (every key under 'tta:' left out?)"."""
    with pytest.raises(ConfigError) as err:
        load_config(None, ["eval.tta="])
    assert str(err.value) == ("override 'eval.tta=': expected a mapping for eval.tta, got null; an override sets one "
                              "key of a section: eval.tta.KEY=VALUE")


@pytest.mark.parametrize("text, got", [("2024-01-01", "datetime.date(2024, 1, 1) (date)"), ("yes", "True (bool)"),
                                       ("12", "12 (int)")])
def test_a_text_key_that_yaml_reads_as_another_type_in_a_file_says_to_quote_it(tmp_path, text, got):
    """In a file the value is YAML, whose date, number or boolean a folder name may be: the message said the
    type expected and got, not that quotes make it text."""
    config = tmp_path / "c.yaml"
    config.write_text(f"train:\n  run_dir: {text}\n")
    with pytest.raises(ConfigError) as err:
        load_config(config)
    assert str(err.value) == (f"{config}:2: train.run_dir: expected str, got {got}; YAML reads a date, a number or "
                              "yes/no/on/off unquoted as such: quote the text for a name ('2024-01-01')")
