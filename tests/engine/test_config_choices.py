"""A key that the chosen optimiser, schedule or loss never reads is refused (pointgeope/engine/config_choices.py)."""
from __future__ import annotations

import json

import pytest
import torch
import yaml

from pointgeope.engine.config import Config, ConfigError, load_config
from tests.engine.conftest import DEMO_CONFIG, REPO, one_line

# key=value set away from its default, a choice that never reads it, and one that does
CASES = [
    ("optim.momentum=0.5", "optim.name=adamw", "optim.name=sgd"),
    ("optim.momentum=0.5", "optim.scheduler=onecycle", "optim.scheduler=multistep"),  # SGD: onecycle cycles it
    ("optim.milestones=[0.5]", "optim.scheduler=cosine", "optim.scheduler=multistep"),
    ("optim.gamma=0.5", "optim.scheduler=onecycle", "optim.scheduler=multistep"),
    ("optim.pct_start=0.3", "optim.scheduler=multistep", "optim.scheduler=onecycle"),
    ("optim.anneal_strategy=linear", "optim.scheduler=cosine", "optim.scheduler=onecycle"),
    ("optim.div_factor=5.0", "optim.scheduler=multistep", "optim.scheduler=onecycle"),
    ("optim.final_div_factor=100.0", "optim.scheduler=cosine", "optim.scheduler=onecycle"),
    ("train.lovasz_weight=2.0", "train.loss=ce", "train.loss=ce_lovasz"),
]


@pytest.mark.parametrize("setting, unread, read", CASES, ids=[f"{c[0].split('=')[0]}-{c[1]}" for c in CASES])
def test_a_key_the_choice_never_reads_is_refused_naming_both(setting, unread, read):
    key, _, value = setting.partition("=")
    chooser, _, choice = unread.partition("=")
    with pytest.raises(ConfigError) as err:
        load_config(None, [unread, setting])
    message = str(err.value)
    assert message.startswith(f"the defaults with the overrides: {key}="), message
    assert message.endswith(f"but {chooser}={choice}, which never reads it; remove it"), message
    assert f"only ({chooser}={read.partition('=')[2]}" in message
    assert load_config(None, [read, setting])          # the choice that reads it takes it
    default = Config()
    section, name = key.split(".")
    assert load_config(None, [unread, f"{key}={getattr(getattr(default, section), name)}"])  # at its default: passes


def test_the_message_words_the_reproduction():
    with pytest.raises(ConfigError) as err:
        load_config(DEMO_CONFIG, ["optim.momentum=0.5", "optim.pct_start=0.5", "train.lovasz_weight=3"])
    assert str(err.value) == (f"{DEMO_CONFIG} with the overrides: optim.momentum=0.5: SGD's only (optim.name=sgd), "
                              "but optim.name=adamw, which never reads it; remove it")


def test_sgds_momentum_under_the_one_cycle_schedule_is_refused():
    """torch's OneCycleLR sets SGD's momentum every step (cycle_momentum: 0.95 -> 0.85 -> 0.95), so a momentum
    of one's own was overwritten at the first step without a word."""
    with pytest.raises(ConfigError) as err:
        load_config(None, ["optim.scheduler=onecycle", "optim.momentum=0.5"])
    assert str(err.value) == ("the defaults with the overrides: optim.momentum=0.5: SGD's under a schedule that "
                              "leaves its momentum (the one-cycle schedule cycles it) only "
                              "(optim.scheduler=multistep/cosine), but optim.scheduler=onecycle, which never reads "
                              "it; remove it")
    from pointgeope.engine import build
    cfg = load_config(None, ["optim.scheduler=onecycle"])   # the default momentum passes: it is cycled


    class Net(torch.nn.Linear):
        def frequency_parameters(self):
            return []

    optimizer = build.optimizer(cfg, Net(2, 2))
    build.scheduler(cfg, optimizer, 10)
    assert [g["momentum"] for g in optimizer.param_groups] == [0.95] * len(optimizer.param_groups)


def test_a_config_file_is_named_at_the_keys_line(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("optim:\n  name: adamw\n  scheduler: cosine\n  milestones: [0.5, 0.7]\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert str(err.value) == (f"{path}:4: optim.milestones=[0.5, 0.7]: the multistep schedule's only "
                              "(optim.scheduler=multistep), but optim.scheduler=cosine, which never reads it; "
                              "remove it")


def test_train_refuses_it_in_one_line_before_any_training(tmp_path, capsys):
    line = one_line(capsys, 2, ["train", "--config", str(DEMO_CONFIG), "--test-area", "1", "--run-dir",
                                str(tmp_path / "run"), "optim.momentum=0.5"])
    assert line.startswith("pointgeope train: error: ") and "optim.momentum=0.5: SGD's only" in line
    assert not (tmp_path / "run").exists()


def _set(config: dict, *settings: str) -> dict:
    """``config`` (a plain dict) with ``section.key=value`` settings, bypassing the check: a record written
    before it."""
    for setting in settings:
        key, _, value = setting.partition("=")
        section, name = key.split(".")
        config[section][name] = yaml.safe_load(value)
    return config


def test_a_runs_record_with_such_a_key_is_still_read(tmp_path):
    """A run trained before the check (its checkpoint's config, its config.yaml) ran with the key ignored:
    evaluate, predict and report still read it as it ran."""
    from pointgeope.engine.config import config_from_dict, config_to_dict, load_record

    record = _set(config_to_dict(Config()), "optim.name=adamw", "optim.momentum=0.5")
    assert config_from_dict(record, where="last.pt's config").optim.momentum == 0.5

    (tmp_path / "config.yaml").write_text(yaml.safe_dump(record))
    assert load_record(tmp_path / "config.yaml").optim.name == "adamw"


@pytest.mark.parametrize("setting, unread, read", CASES, ids=[f"{c[0].split('=')[0]}-{c[1]}" for c in CASES])
def test_a_key_neither_choice_reads_is_no_difference_to_resume(setting, unread, read):
    """A checkpoint's config with the key set beside a choice that never reads it compares equal to the
    config without it (what the refusal asks for), so the run resumes; where either side reads it, it differs."""
    from pointgeope.engine.config import config_to_dict
    from pointgeope.engine.config_diff import config_differences

    key, value = setting.split("=")
    chooser, was = unread.split("=")
    reader = read.split("=")[1]
    section, name = key.split(".")
    value, default = yaml.safe_load(value), getattr(getattr(Config(), section), name)

    def current(choice):
        return config_to_dict(load_config(None, [choice]))

    old = _set(config_to_dict(Config()), unread, setting)       # written before the refusal
    assert config_differences(old, current(unread)) == []
    assert config_differences(old, current(read)) == sorted([(chooser, was, reader), (key, value, default)])
    old = _set(config_to_dict(Config()), read, setting)         # the saved choice read it
    assert config_differences(old, current(read)) == [(key, value, default)]
    assert config_differences(old, current(unread)) == sorted([(chooser, reader, was), (key, value, default)])


def _add_to_record(fold, *settings: str) -> None:
    """Write ``settings`` into the config of ``fold``'s last.pt and config.yaml, as a run trained before the
    check recorded them."""
    from pointgeope.engine.checkpoint import save_checkpoint

    ckpt = torch.load(fold / "last.pt", map_location="cpu", weights_only=True)
    _set(ckpt["config"], *settings)
    save_checkpoint(fold / "last.pt", ckpt)
    (fold / "config.yaml").write_text(yaml.safe_dump(_set(yaml.safe_load((fold / "config.yaml").read_text()),
                                                          *settings)))


@pytest.mark.slow
def test_a_run_trained_with_such_a_key_resumes_and_is_skipped_once_it_is_removed(two_folds, tmp_path, capsys):
    """A run started before the refusal with optim.momentum=0.5 under adamw (TINY's optimiser): the same
    command without the key (as the refusal says) resumes it, train --cv skips it once complete, and a
    run whose SGD did read the key is still refused."""
    from tests.engine.test_train import train

    fold = tmp_path / "area_1"
    assert train(two_folds, tmp_path, "train.epochs=2", "train.epochs_per_run=1") == 0     # epoch 1 of 2
    _add_to_record(fold, "optim.momentum=0.5")
    capsys.readouterr()
    assert train(two_folds, tmp_path, "train.epochs=2") == 0
    assert "resumed from" in capsys.readouterr().out
    assert torch.load(fold / "last.pt", weights_only=True)["epoch"] == 2
    assert json.loads((fold / "metrics.json").read_text())["complete"] is True
    _add_to_record(fold, "optim.momentum=0.5")
    stamp = (fold / "metrics.json").stat().st_mtime_ns
    # fold 1 is complete; fold 2 trains one epoch and stops there (train.epochs_per_run: free, and fold 2's own
    # training and test were not what this checks)
    assert train(two_folds, tmp_path, "train.epochs=2", "train.epochs_per_run=1", fold="cv") == 0
    assert f"fold 1: {fold / 'metrics.json'} is complete, skipped" in capsys.readouterr().out
    assert (fold / "metrics.json").stat().st_mtime_ns == stamp
    _add_to_record(fold, "optim.name=sgd")                                        # SGD read momentum 0.5
    assert train(two_folds, tmp_path, "train.epochs=2", "optim.name=sgd") == 2
    assert capsys.readouterr().err.strip() == (
        f"train.py: error: {fold} is complete with another config (optim.momentum: run 0.5, now 0.9); --force "
        "retrains it, or use another --run-dir")


@pytest.mark.parametrize("setting", ["eval.tta.flips=true", "eval.tta.scales=[0.9, 1.0]", "eval.tta.rotations=4"])
def test_test_time_views_beside_ptv3s_test_are_refused_when_the_config_is_read(setting, tmp_path):
    """eval.protocol=ptv3 tests with its own 10 views: train took eval.tta and refused it only once the
    training was done, at the test."""
    from pointgeope.engine.config import config_from_dict, config_to_dict

    ptv3 = REPO / "configs" / "demo_ptv3.yaml"
    key, _, value = setting.partition("=")
    with pytest.raises(ConfigError) as err:
        load_config(ptv3, [setting])
    assert str(err.value) == (f"{ptv3} with the overrides: {key}={value}: the PTv1 test's only "
                              "(eval.protocol=ptv1), but eval.protocol=ptv3, which never reads it; remove it")
    assert load_config(ptv3).eval.protocol == "ptv3"           # the default views pass
    assert load_config(DEMO_CONFIG, [setting]).eval.tta != Config().eval.tta   # PTv1's test takes them
    record = config_to_dict(load_config(ptv3))                 # a run's record with them is still read
    record["eval"]["tta"][key.rsplit(".", 1)[1]] = yaml.safe_load(value)
    assert config_from_dict(record, where="last.pt's config").eval.protocol == "ptv3"


def test_train_refuses_ptv3_with_test_time_views_before_any_training(tmp_path, capsys):
    line = one_line(capsys, 2, ["train", "--config", str(REPO / "configs" / "demo_ptv3.yaml"), "--test-area", "1",
                                "--run-dir", str(tmp_path / "run"), "eval.tta.flips=true"])
    assert line.startswith("pointgeope train: error: ") and "eval.tta.flips=true: the PTv1 test's only" in line
    assert not (tmp_path / "run").exists()


def test_the_best_checkpoint_without_validation_is_refused_when_the_config_is_read():
    """Without validation (train.val_every: 0) best.pt is saved every epoch: eval.checkpoint=best tested the
    last epoch without a word, a run the user believed selected by validation."""
    from pointgeope.engine.config import config_from_dict, config_to_dict

    with pytest.raises(ConfigError) as err:
        load_config(DEMO_CONFIG, ["eval.checkpoint=best"])
    assert str(err.value) == (f"{DEMO_CONFIG} with the overrides: eval.checkpoint=best: the validation's pick "
                              "(train.val_every=N validates every N epochs), but train.val_every=0, so best.pt holds "
                              "the last epoch, as last.pt; set train.val_every=1, or remove it")
    assert load_config(DEMO_CONFIG, ["eval.checkpoint=best", "train.val_every=2"]).eval.checkpoint == "best"
    record = config_to_dict(load_config(DEMO_CONFIG))            # a run's record with it is still read
    record["eval"]["checkpoint"] = "best"
    assert config_from_dict(record, where="last.pt's config").eval.checkpoint == "best"
