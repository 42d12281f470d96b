"""Tests of pointgeope/engine/ablation_reuse.py and of ablate's saved trials: a trial saved with other settings
is stale and says which, a result without its config is checked against what recorded it, a rerun with other
settings is refused before any trial starts, and trials outside the grid are named."""
from __future__ import annotations

import json

import pytest

from pointgeope.cli import main as cli
from pointgeope.engine.ablation import plan
from pointgeope.errors import UserError
from tests.engine.conftest import DEMO_CONFIG, TINY, ablate_args, last_line_only


def test_a_trial_saved_with_other_settings_is_stale_and_says_which(two_folds, tmp_path):
    """A rerun with other overrides reported the trials' old results under the new header. stale() compares
    the config a trial's metrics.json records with the trial's config now, by train's own rules (the keys
    a resume must match; the eval.* keys train does not apply to a complete fold, with the command that
    tests the fold with them)."""
    from pointgeope.engine.ablation import stale
    from pointgeope.engine.config import config_to_dict, load_config

    trials, common = plan(DEMO_CONFIG, ["rpe"], [0], 1, tmp_path, [f"data.root={two_folds}", *TINY], 1)
    trial, fold = trials[0], trials[0].folder / "area_1"
    fold.mkdir(parents=True)
    assert stale(trial, 1) == ""                                                     # nothing recorded yet

    def recorded(*changes):
        config = config_to_dict(load_config(DEMO_CONFIG, trial.overrides(common) + list(changes)))
        (fold / "metrics.json").write_text(json.dumps({"area": "Area_1", "complete": True, "config": config}))
        return stale(trial, 1)

    assert recorded() == ""
    assert recorded("train.epochs=1") == "stale: trained with other settings (train.epochs: it used 1, now 2)"
    why = recorded("eval.class_mean=present")
    assert why.startswith("stale: its test did not use this command's eval.class_mean=all (it used present)")
    command = why.split("complete fold: ")[1]       # every eval value: the fold has no config.yaml to start from
    assert command.startswith(f"pointgeope evaluate {fold} eval.") and command.endswith(" tests it with them")
    assert " eval.class_mean=all " in command
    assert stale(trial, 2) == ""                                                     # fold 2: none saved


def test_stale_compares_with_the_configs_resolved_before_the_trials_ran(two_folds, tmp_path):
    """stale() reloaded each trial's config from the file after the trials ran: a file edited meanwhile made
    every fresh result stale (or an old one fresh). The plan's configs are compared, whatever the file says now."""
    from pointgeope.engine.ablation import stale
    from pointgeope.engine.config import config_to_dict, load_config

    config = tmp_path / "abl.yaml"
    config.write_text(f"base: {DEMO_CONFIG}\n")
    trials, common = plan(config, ["rpe"], [0], 1, tmp_path / "abl", [f"data.root={two_folds}", *TINY], 1)
    trial, fold = trials[0], trials[0].folder / "area_1"
    assert trial.config == config_to_dict(load_config(config, trial.overrides(common)))
    fold.mkdir(parents=True)
    (fold / "metrics.json").write_text(json.dumps({"area": "Area_1", "complete": True, "config": trial.config}))
    config.write_text(f"base: {DEMO_CONFIG}\ntrain:\n  epochs: 7\noptim:\n  lr: 0.3\n")   # edited while it ran
    assert stale(trial, 1) == ""


def test_a_result_without_its_config_is_checked_against_its_checkpoint_else_reported_unchecked(two_folds, tmp_path):
    """A metrics.json written before evaluate recorded the config was never compared (silently fresh). Now
    its checkpoint's config (last.pt, else best.pt) is compared; without one it is scored with a note."""
    from pointgeope.engine.ablation import NOT_CHECKED, _left_out, stale
    from pointgeope.engine.checkpoint import save_checkpoint
    from pointgeope.engine.config import config_to_dict, load_config

    trials, common = plan(DEMO_CONFIG, ["rpe"], [0], 1, tmp_path, [f"data.root={two_folds}", *TINY], 1)
    trial, fold = trials[0], trials[0].folder / "area_1"
    fold.mkdir(parents=True)
    (fold / "metrics.json").write_text(json.dumps({"area": "Area_1", "complete": True}))
    assert stale(trial, 1) is None
    assert _left_out(trials, [0], 1) == ({}, {("rpe", 0): NOT_CHECKED})
    assert _left_out(trials, [2], 1)[1] == {}                       # a failed trial is left out, not noted
    older = config_to_dict(load_config(DEMO_CONFIG, trial.overrides(common) + ["train.epochs=1"]))
    save_checkpoint(fold / "best.pt", {"config": older})
    assert stale(trial, 1) == "stale: trained with other settings (train.epochs: it used 1, now 2)"
    (fold / "last.pt").write_bytes(b"cut short")                    # unreadable: best.pt still tells
    assert stale(trial, 1) == "stale: trained with other settings (train.epochs: it used 1, now 2)"
    save_checkpoint(fold / "last.pt", {"config": trial.config})
    assert stale(trial, 1) == ""
    assert _left_out(trials, [0], 1) == ({}, {})


def test_a_result_without_its_config_is_checked_against_the_folds_config_yaml_first(two_folds, tmp_path, monkeypatch):
    """The fold's config.yaml (train writes it) is read before any checkpoint (checkpoint.fold_config): a whole
    checkpoint was loaded to read its config, and a fold with config.yaml and no readable checkpoint went
    unchecked."""
    from pointgeope.engine import checkpoint
    from pointgeope.engine.ablation import stale
    from pointgeope.engine.config import load_config, save_config

    trials, common = plan(DEMO_CONFIG, ["rpe"], [0], 1, tmp_path, [f"data.root={two_folds}", *TINY], 1)
    trial, fold = trials[0], trials[0].folder / "area_1"
    fold.mkdir(parents=True)
    (fold / "metrics.json").write_text(json.dumps({"area": "Area_1", "complete": True}))
    (fold / "last.pt").write_bytes(b"cut short")
    monkeypatch.setattr(checkpoint, "load_checkpoint", lambda *a, **k: pytest.fail("a checkpoint was loaded"))
    save_config(load_config(DEMO_CONFIG, trial.overrides(common) + ["train.epochs=1"]), fold / "config.yaml")
    assert stale(trial, 1) == "stale: trained with other settings (train.epochs: it used 1, now 2)"
    save_config(load_config(DEMO_CONFIG, trial.overrides(common)), fold / "config.yaml")
    assert stale(trial, 1) == ""


def test_a_saved_trial_of_other_settings_is_refused_before_any_trial_starts(two_folds, tmp_path, capsys):
    """A rerun with another train.epochs started every trial, each refused by train with the advice of its
    --force, which ablate has not (21 processes for `make ablation`'s grid), then failed with "none of the trials
    has a result". Now plan() compares each trial's last.pt config with the trial's by train's rule, before any
    trial starts; a free key (train.threads) is no difference, as for train."""
    from pointgeope.engine.checkpoint import save_checkpoint
    from pointgeope.engine.config import config_to_dict, load_config

    run = tmp_path / "abl"
    settings = [f"data.root={two_folds}", *TINY]
    trials, common = plan(DEMO_CONFIG, ["rpe", "none"], [0, 1], 1, run, settings, 1)
    for trial in trials[1:]:                                   # rpe seed 1, none seed 0, none seed 1: as asked
        (trial.folder / "area_1").mkdir(parents=True)
        saved = config_to_dict(load_config(DEMO_CONFIG, trial.overrides(common) + ["train.threads=3"]))
        save_checkpoint(trial.folder / "area_1" / "last.pt", {"config": saved})
    assert plan(DEMO_CONFIG, ["rpe", "none"], [0, 1], 1, run, settings, 1)[0] == trials
    (trials[2].folder / "area_1" / "last.pt").unlink()           # none seed 0 trained for one epoch
    older = config_to_dict(load_config(DEMO_CONFIG, trials[2].overrides(common) + ["train.epochs=1"]))
    save_checkpoint(trials[2].folder / "area_1" / "last.pt", {"config": older})
    assert cli(ablate_args(two_folds, run, presets=("rpe", "none"), seeds=("0", "1"))) == 2
    last_line_only(capsys.readouterr().err, f"pointgeope ablate: error: --run-dir {run}: 1 of the 4 trials was "
                   "trained with other settings than this command's (none seed 0: train.epochs: it used 1, now 2), "
                   "and train neither resumes nor reuses such a fold: give another --run-dir, or delete "
                   f"{trials[2].folder / 'area_1'} to train it again with these settings")
    assert not any(run.glob("*/*/train.log"))                # no trial started


def test_other_trials_are_those_of_the_fold_outside_the_grid(two_folds, tmp_path):
    from pointgeope.engine.ablation_reuse import other_trials

    run = tmp_path / "abl"
    trials, _ = plan(DEMO_CONFIG, ["rpe"], [0], 1, run, [f"data.root={two_folds}", *TINY], 1)
    for folder in ("rpe/seed_0/area_1", "rpe/seed_12/area_1", "none/seed_3/area_1", "none/seed_4/area_2",
                   "none/seed_x/area_1", "geope/seed_5/area_1"):
        (run / folder).mkdir(parents=True)
        if folder != "geope/seed_5/area_1":                                 # no metrics.json: never tested
            (run / folder / "metrics.json").write_text("{}")
    assert other_trials(trials, 1, run) == ["none seed 3", "rpe seed 12"]


def test_a_saved_trial_of_other_data_is_refused_before_any_trial_starts(two_folds, tmp_path, capsys):
    """A data folder prepared again under an ablation's saved trials: each trial started, loaded its data and
    its last.pt, and was refused by train ("trained on other data than ... holds now") with the advice of
    train's --force. Now plan() compares each saved last.pt's area checksums with the files there now, as train
    does, before any trial starts; a last.pt of these files passes, one of another fold is refused too."""
    from pointgeope.data.check import area_checksums
    from pointgeope.data.folds import fold_of, load_folds
    from pointgeope.engine.checkpoint import save_checkpoint
    from pointgeope.engine.fold_record import fold_record

    run, settings = tmp_path / "abl", [f"data.root={two_folds}", *TINY]
    trials, _ = plan(DEMO_CONFIG, ["rpe", "none"], [0], 1, run, settings, 1)
    now = area_checksums(two_folds, ["Area_1", "Area_2", "Area_3"])
    fold1, fold2 = (fold_record(fold_of(load_folds(two_folds), k, two_folds)) for k in (1, 2))
    for trial in trials:
        (trial.folder / "area_1").mkdir(parents=True)
        save_checkpoint(trial.folder / "area_1" / "last.pt", {"config": trial.config, "data": now, "fold": fold1})
    assert plan(DEMO_CONFIG, ["rpe", "none"], [0], 1, run, settings, 1)[0] == trials      # these files: passes
    before = {**now, "Area_2": "sha256:" + "0" * 64}                                       # Area_2 prepared again
    save_checkpoint(trials[1].folder / "area_1" / "last.pt", {"config": trials[1].config, "data": before,
                                                              "fold": fold1})
    assert cli(ablate_args(two_folds, run, presets=("rpe", "none"), seeds=("0",))) == 2
    err = capsys.readouterr().err
    last_line_only(err, err.splitlines()[-1])
    line = err.splitlines()[-1]
    assert line.startswith(f"pointgeope ablate: error: --run-dir {run}: 1 of the 2 trials cannot be resumed or "
                           f"reused on the data folder {two_folds} as it is now (none seed 0: "
                           f"{trials[1].folder / 'area_1' / 'last.pt'} was trained on other data than {two_folds} "
                           "holds now (Area_2.h5 trained on sha256:000000000000...")
    assert line.endswith(f"restore the data it trained on, give another --run-dir, or delete "
                         f"{trials[1].folder / 'area_1'} to train it again on this data")
    assert "--force" not in line
    assert not any(run.glob("*/*/train.log"))                # no trial started
    save_checkpoint(trials[1].folder / "area_1" / "last.pt", {"config": trials[1].config, "data": now, "fold": fold2})
    with pytest.raises(UserError, match=r"1 of the 2 trials cannot be resumed .*trained for fold 2 \(test Area_2"):
        plan(DEMO_CONFIG, ["rpe", "none"], [0], 1, run, settings, 1)


def test_train_advice_stays_out_of_ablate_line_whatever_its_words(two_folds, tmp_path, capsys, monkeypatch):
    """ablate cut train's advice out of the refusal's text at its first words ("; restore the data"): advice
    worded otherwise would have reached ablate's line with train's --force, which ablate does not have. The
    refusal now carries its advice apart (CheckpointError.advice), and ablate says the problem alone."""
    import pickle

    from pointgeope.data.check import area_checksums
    from pointgeope.data.folds import fold_of, load_folds
    from pointgeope.engine import trained_data
    from pointgeope.engine.checkpoint import CheckpointError, save_checkpoint
    from pointgeope.engine.fold_record import fold_record

    err = CheckpointError("x.pt: the problem", advice="pointgeope train with --force retrains it")
    assert str(err) == "x.pt: the problem; pointgeope train with --force retrains it"
    again = pickle.loads(pickle.dumps(err))
    assert (str(again), again.problem, again.advice) == (str(err), err.problem, err.advice)
    assert str(CheckpointError("x.pt: the problem")) == "x.pt: the problem"

    run, settings = tmp_path / "abl", [f"data.root={two_folds}", *TINY]
    trials, _ = plan(DEMO_CONFIG, ["rpe"], [0], 1, run, settings, 1)
    now = area_checksums(two_folds, ["Area_1", "Area_2", "Area_3"])
    fold1 = fold_record(fold_of(load_folds(two_folds), 1, two_folds))
    (trials[0].folder / "area_1").mkdir(parents=True)
    save_checkpoint(trials[0].folder / "area_1" / "last.pt", {"config": trials[0].config, "data": now, "fold": fold1})

    def refuse(path, *args, **kwargs):
        raise CheckpointError(f"{path} was trained on other data", advice="rerun pointgeope train --force to retrain")

    monkeypatch.setattr(trained_data, "check_data_of", refuse)
    assert cli(ablate_args(two_folds, run, presets=("rpe",), seeds=("0",))) == 2
    line = capsys.readouterr().err.splitlines()[-1]
    assert f"(rpe seed 0: {trials[0].folder / 'area_1' / 'last.pt'} was trained on other data), and train" in line
    assert "--force" not in line and "retrain" not in line


@pytest.mark.parametrize("data", [7, [[1]], ["Area_1"]])
def test_a_saved_trial_whose_data_record_is_damaged_is_refused_in_one_line(tmp_path, data):
    """A trial's last.pt whose "data" record is no mapping of area -> checksum: ablate's check of the saved
    trials built its set of areas from it first, a TypeError traceback ('int' object is not iterable,
    unhashable type: 'list') or an AttributeError, before train's own check could refuse it."""
    from pointgeope.data.folds import Fold
    from pointgeope.engine.ablation_reuse import _check_data
    from pointgeope.errors import UserError

    class Trial:  # what _check_data reads of a trial: its name, folder and config
        name, folder, config = "t1", tmp_path / "t1", {"data": {"root": str(tmp_path / "data")}}

    trial = Trial()
    fold = Fold(1, ("Area_2",), ("Area_1",))
    with pytest.raises(UserError) as err:
        _check_data([trial], {trial: {"data": data, "fold": {"index": 1, "test": ["Area_1"], "train": ["Area_2"]}}},
                    1, tmp_path / "grid", fold)
    assert (f"(t1: {tmp_path / 't1' / 'area_1' / 'last.pt'}: damaged checkpoint: expected its 'data' entry to map "
            f"each area to the checksum of its file, got {data!r}; use the run's own checkpoint)") in str(err.value)
