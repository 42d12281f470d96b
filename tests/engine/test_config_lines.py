"""A key refused in a config file is named with its line (pointgeope/engine/config_yaml.py reads the lines,
pointgeope/engine/config.py names them): ``FILE:LINE: key ...``, every kind of refusal of a file's key; an
override has no line and keeps its wording."""
from __future__ import annotations

import re

import pytest

from pointgeope.engine.ablation import plan
from pointgeope.engine.config import ConfigError, load_config, load_record
from pointgeope.engine.config_yaml import at_line, key_line, load_yaml_lines
from tests.engine.conftest import DEMO_CONFIG, REPO, one_line

# (the file, the line of the refused key, the message after "FILE:LINE: ")
REFUSED = [
    ("train:\n  seed: 1\n  epoch: 3\n", 3, "unknown key 'train.epoch'; did you mean 'train.epochs'?"),
    ("# a comment\n\noptim:\n  lr: fast\n", 4, "optim.lr: expected float, got 'fast' (str)"),
    ("data:\n  augment: ptv2\n", 2, "data.augment: expected one of"),
    ("model:\n  planes:\n  - 16\n  - 0\n", 4, "model.planes[1]: expected an integer >= 1, got 0"),
    ("train:\n  epochs: 0\n", 2, "train.epochs: expected an integer >= 1, got 0"),
    ("data:\n  root: x\nmodel: 3\n", 3, "expected a mapping for model, got 3"),
    # a section whose keys are all commented out: it said "got None"
    ("data:\n  root: x\neval:\n  tta:\n    # flips: true\n", 4, "expected a mapping for eval.tta, got nothing "
     "(every key under 'tta:' left out?); give it a key, or remove it"),
    ("optim:\n  lr: 0.1\nbase: 3\n", 3, "expected 'base:' to be a file name, got 3"),
    # 'base:' with no value was read as no base: the built-in defaults for every key the file does not set
    ("base:\ntrain:\n  epochs: 2\n", 1, "expected 'base:' to be a file name, got None; give the base config's "
                                          "file (e.g. base: demo.yaml), or remove the line"),
    # keys that must agree: the line of the first key the message names that the file sets
    ("model:\n  pe: pointrope\n  geope_base: 50\n", 3, "model.geope_base=50.0: GeoPE's frequencies, but "
                                                        "model.pe=pointrope"),
    ("model:\n  pe: rpe\n\n  point3drope_scale: 2\n", 4, "model.point3drope_scale=2.0: only model.pe=point3drope"),
    ("train:\n  seed: 0\nmodel:\n  planes: [32, 64]\n", 4, "model.blocks: expected one entry per stage, 2 as in "
                                                           "model.planes [32, 64]"),
    ("data:\n  root: x\n  mix_prob: 0.5\n", 3, "data.mix_prob=0.5 needs data.augment=pointcept_ptv3"),
    # a dotted key written in a file (an override's form): its own line, not that of optim:'s lr, and the
    # nested form (it said "did you mean 'optim'?" at line 2)
    ("optim:\n  lr: 0.1\ntrain:\n  epochs: 2\noptim.lr: 0.5\n", 5, "unknown key 'optim.lr': a dotted name is an "
     "override's form (optim.lr=0.5 on the command line); in a file, write 'lr: 0.5' under 'optim:'"),
    ("train: {epochs: 2}\ntrain.epochs: 3\n", 2, "unknown key 'train.epochs': a dotted name is an override's form "
     "(train.epochs=3 on the command line); in a file, write 'epochs: 3' under 'train:'"),
    ("eval:\n  tta.flips: true\n", 2, "unknown key 'eval.tta.flips': a dotted name is an override's form "
     "(eval.tta.flips=true on the command line); in a file, write 'flips: true' under 'eval:' -> 'tta:'"),
]


@pytest.mark.parametrize("text, line, message", REFUSED)
def test_a_refused_key_of_a_file_is_named_with_its_line(tmp_path, text, line, message):
    config = tmp_path / "c.yaml"
    config.write_text(text)
    for overrides in ([], ["train.seed=2"]):               # an override that changes nothing of it: still the file's
        with pytest.raises(ConfigError) as err:
            load_config(config, overrides)
        assert str(err.value).startswith(f"{config}:{line}: {message}"), str(err.value)


def test_a_key_of_a_base_file_is_named_in_the_base_and_the_top_files_key_in_the_top(tmp_path):
    base = tmp_path / "_base.yaml"
    base.write_text("train:\n  seed: 1\nmodel:\n  geope_base: 50\n")
    top = tmp_path / "top.yaml"
    top.write_text("base: _base.yaml\nmodel:\n  pe: pointrope\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(base))}:4: model.geope_base=50.0: GeoPE's frequencies"):
        load_config(top)
    top.write_text("base: _base.yaml\n\nmodel:\n  geope_base: 60\n  pe: pointrope\n")   # the top sets it again
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(top))}:4: model.geope_base=60.0: GeoPE's frequencies"):
        load_config(top)


def test_an_override_has_no_line_and_keeps_its_wording(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text("model:\n  pe: pointrope\n")
    with pytest.raises(ConfigError, match=r"^override 'train.epochs=0': train.epochs: expected an integer >= 1"):
        load_config(config, ["train.epochs=0"])
    with pytest.raises(ConfigError,
                       match=rf"^{re.escape(str(config))} with the overrides: model.geope_base=50.0: GeoPE's"):
        load_config(config, ["model.geope_base=50"])


def test_a_runs_saved_config_is_named_with_its_line_too(tmp_path):
    record = tmp_path / "config.yaml"
    record.write_text("data:\n  root: x\ntrain:\n  epochs: -1\n")
    with pytest.raises(ConfigError,
                       match=rf"^{re.escape(str(record))}:4: train.epochs: expected an integer >= 1, got -1"):
        load_record(record)


def test_an_ablations_preset_check_names_the_files_line(two_folds, tmp_path):
    """The presets' check of a key the file sets (config_values.presets_problem through ablation.plan)."""
    config = tmp_path / "abl.yaml"
    config.write_text(f"base: {REPO / 'configs' / 'demo_ptv3.yaml'}\nmodel:\n  point3drope_scale: 1\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(config))}:3: model.point3drope_scale=1.0: read by "
                                          r"--presets point3drope, but --presets geope would ignore it"):
        plan(config, ["geope", "point3drope"], [0], 1, tmp_path / "abl", [f"data.root={two_folds}"], 1)


def test_train_names_the_line_in_one_line_and_exit_code_2(tmp_path, capsys):
    config = tmp_path / "bad.yaml"
    config.write_text(f"base: {DEMO_CONFIG}\noptim:\n  lr: 0.1\n  learning_rate: 3\n")
    line = one_line(capsys, 2, ["train", "--config", str(config), "--test-area", "1", "--run-dir", str(tmp_path / "r")])
    assert line == (f"pointgeope train: error: {config}:4: unknown key 'optim.learning_rate'; did you mean "
                    "'optim.lr'?")
    assert not (tmp_path / "r").exists()


def test_the_lines_come_from_the_yaml_nodes():
    """Lines of keys and list entries (block and flow), comments and blank lines counted, as an editor does."""
    text = "# head\nmodel:\n\n  planes:\n  - 16\n  - 32\n  blocks: [1, 2]\noptim: {lr: 0.1}\n"
    document, lines = load_yaml_lines(text)
    assert document == {"model": {"planes": [16, 32], "blocks": [1, 2]}, "optim": {"lr": 0.1}}
    assert lines == {"model": 2, "model.planes": 4, "model.planes[0]": 5, "model.planes[1]": 6, "model.blocks": 7,
                     "model.blocks[0]": 7, "model.blocks[1]": 7, "optim": 8, "optim.lr": 8}
    assert key_line(lines, "model.planes[1]: expected an integer") == 6
    assert key_line(lines, "model.planes[5]: expected an integer") == 4             # no such entry: its key
    assert key_line(lines, "model.strides: expected 2 entries as in model.blocks") == 7   # the first it holds
    assert key_line(lines, "see configs/x.yaml and data/mix3d.py") is None          # paths are not keys
    # a key holding a dot is its own entry, quoted: it does not take the nested key's line
    assert load_yaml_lines("optim:\n  lr: 1\noptim.lr: 2\n")[1] == {"optim": 1, "optim.lr": 2, "'optim.lr'": 3}


def test_a_keys_line_is_its_own_or_its_entrys_never_another_keys():
    """at_line looked the whole message up, then the first key it named: a message naming another key first
    pointed at that key's line. Now the key's line, or that of its entry the message names."""
    lines = {"model.strides": 3, "model.planes": 4, "model.planes[1]": 6}
    assert at_line("x.yaml", lines, "model.planes", "model.strides as in model.planes[1]: expected 32") == "x.yaml:6"
    assert at_line("x.yaml", lines, "model.planes", "model.strides and model.planes disagree") == "x.yaml:4"
    assert at_line("x.yaml", lines, "model.planes", "model.planes[7]: no such entry") == "x.yaml:4"
    assert at_line("x.yaml", lines, "model.planes") == "x.yaml:4"
    assert at_line("x.yaml", lines, "optim.lr", "model.planes: set") == "x.yaml"        # the file does not set it
    assert at_line("override 'a.b=1'", None, "a.b") == "override 'a.b=1'"


def test_a_key_yaml_reads_as_a_bool_or_a_number_is_named_at_its_line(tmp_path):
    """YAML 1.1 reads ``yes:`` as the key true: "unknown key 'data.True'" came without the file's line."""
    path = tmp_path / "c.yaml"
    for text, name in (("data:\n  loop: 2\n  yes: 2\n", "data.True"), ("train:\n  epochs: 1\n  1: 2\n", "train.1")):
        path.write_text(text)
        with pytest.raises(ConfigError) as err:
            load_config(path)
        assert str(err.value).startswith(f"{path}:3: unknown key '{name}'"), err.value


def test_an_empty_base_names_its_line(tmp_path):
    """``base: ""`` said "expected a config file, found a folder at <the config's folder>", not the line."""
    path = tmp_path / "c.yaml"
    path.write_text('train:\n  epochs: 1\nbase: ""\n')
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (f"{path}:3: expected 'base:' to be a file name, got ''; give the base config's file "
                              "(e.g. base: demo.yaml), or remove the line")
