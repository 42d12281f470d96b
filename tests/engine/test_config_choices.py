"""A key that the chosen optimiser, schedule or loss never reads is refused (pointgeope/engine/config_choices.py)."""
from __future__ import annotations

import pytest
import yaml

from pointgeope.engine.config import Config, ConfigError, load_config
from tests.engine.conftest import DEMO_CONFIG, one_line

# key=value set away from its default, a choice that never reads it, and one that does
CASES = [
    ("optim.momentum=0.5", "optim.name=adamw", "optim.name=sgd"),
    ("optim.milestones=[0.5]", "optim.scheduler=cosine", "optim.scheduler=multistep"),
    ("optim.gamma=0.5", "optim.scheduler=onecycle", "optim.scheduler=multistep"),
    ("optim.pct_start=0.3", "optim.scheduler=multistep", "optim.scheduler=onecycle"),
    ("optim.anneal_strategy=linear", "optim.scheduler=cosine", "optim.scheduler=onecycle"),
    ("optim.div_factor=5.0", "optim.scheduler=multistep", "optim.scheduler=onecycle"),
    ("optim.final_div_factor=100.0", "optim.scheduler=cosine", "optim.scheduler=onecycle"),
    ("train.lovasz_weight=2.0", "train.loss=ce", "train.loss=ce_lovasz"),
]


@pytest.mark.parametrize("setting, unread, read", CASES, ids=[c[0].split("=")[0] for c in CASES])
def test_a_key_the_choice_never_reads_is_refused_naming_both(setting, unread, read):
    key, _, value = setting.partition("=")
    chooser, _, choice = unread.partition("=")
    with pytest.raises(ConfigError) as err:
        load_config(None, [unread, setting])
    message = str(err.value)
    assert message.startswith(f"the defaults with the overrides: {key}="), message
    assert message.endswith(f"but {chooser}={choice}, which never reads it; remove it"), message
    assert f"only ({chooser}={read.partition('=')[2]})" in message
    assert load_config(None, [read, setting])          # the choice that reads it takes it
    default = Config()
    section, name = key.split(".")
    assert load_config(None, [unread, f"{key}={getattr(getattr(default, section), name)}"])  # at its default: passes


def test_the_message_words_the_reproduction():
    with pytest.raises(ConfigError) as err:
        load_config(DEMO_CONFIG, ["optim.momentum=0.5", "optim.pct_start=0.5", "train.lovasz_weight=3"])
    assert str(err.value) == (f"{DEMO_CONFIG} with the overrides: optim.momentum=0.5: SGD's only (optim.name=sgd), "
                              "but optim.name=adamw, which never reads it; remove it")


def test_a_config_file_is_named_at_the_keys_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("optim:\n  name: adamw\n  scheduler: cosine\n  milestones: [0.5, 0.7]\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (f"{path}:4: optim.milestones=[0.5, 0.7]: the multistep schedule's only "
                              "(optim.scheduler=multistep), but optim.scheduler=cosine, which never reads it; remove it")


def test_train_refuses_it_in_one_line_before_any_training(tmp_path, capsys):
    line = one_line(capsys, 2, ["train", "--config", str(DEMO_CONFIG), "--test-area", "1", "--run-dir",
                                str(tmp_path / "run"), "optim.momentum=0.5"])
    assert line.startswith("pointgeope train: error: ") and "optim.momentum=0.5: SGD's only" in line
    assert not (tmp_path / "run").exists()


def test_a_runs_record_with_such_a_key_is_still_read(tmp_path):
    """A run trained before the check (its checkpoint's config, its config.yaml) ran with the key ignored:
    evaluate, predict and report still read it as it ran."""
    from pointgeope.engine.config import config_from_dict, config_to_dict, load_record

    record = config_to_dict(Config())
    record["optim"].update(name="adamw", momentum=0.5)
    assert config_from_dict(record, where="last.pt's config").optim.momentum == 0.5

    (tmp_path / "config.yaml").write_text(yaml.safe_dump(record))
    assert load_record(tmp_path / "config.yaml").optim.name == "adamw"
