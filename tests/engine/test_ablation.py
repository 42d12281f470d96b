"""Tests of pointgeope/engine/ablation.py (``pointgeope ablate``): the input checked before any training,
then presets x seeds of tiny trainings in two processes, resumed, with a failed trial reported."""
from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys

import pytest

from pointgeope.cli import main as cli
from pointgeope.engine.ablation import plan
from tests.conftest import process_ended
from tests.engine.conftest import DEMO_CONFIG, TINY, ablate_args, ignore_sigint, last_line_only


@pytest.fixture(scope="module")
def grid(two_folds, tmp_path_factory, forked_trials):
    """``ablate`` of rpe, none x seeds 0, 1 on fold 1, one epoch, two trials at a time: ``RUN`` with the four
    trials and ``RUN/report/fold_1``, trained once for the tests of this file. A test that writes works on a
    copy (:func:`copy_trials`). The in-process ``ablate`` runs of this file fork their trials from one server
    (:mod:`tests.engine.trial_server`); the SIGTERM tests run ``ablate`` and its trials as processes."""
    run = tmp_path_factory.mktemp("grid") / "abl"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys, "executable", forked_trials)
        assert cli(ablate_args(two_folds, run, "train.epochs=1", jobs="2")) == 0
    return run


def copy_trials(grid, run, *names):
    """``run`` holding a copy of the ``grid``'s folders ``names`` (``rpe/seed_0``, ``report``, ...): a copied
    trial is skipped or resumed as the original would be (train.run_dir is no setting a trial is compared by)."""
    for name in names:
        shutil.copytree(grid / name, run / name)
    return run


@pytest.mark.parametrize("presets, seeds, jobs, extra, message", [
    (("rpe", "rpe"), ("0",), "1", (), "--presets: expected distinct values, got rpe rpe"),
    (("rpe",), ("1", "1"), "1", (), "--seeds: expected distinct values, got 1 1"),
    (("rpe",), ("0",), "1", ("train.seed=3",), "override 'train.seed=3': the ablation sets train.seed for each trial"),
    (("geope", "foo"), ("0",), "1", (), "--presets: 'foo' is not a positional encoding of model.backbone=ptv1; "
                                        "expected one of rpe, geope"),
    (("rpe", "point3drope"), ("0",), "1", (), "--presets: 'point3drope' is a PTv3 encoding, but model.backbone=ptv1"),
    (("rpe",), ("0",), "0", (), "--jobs: expected at least 1, got 0"),
])
def test_bad_input_is_one_line_before_any_training(two_folds, tmp_path, capsys, presets, seeds, jobs, extra, message):
    assert cli(ablate_args(two_folds, tmp_path / "abl", *extra, presets=presets, seeds=seeds, jobs=jobs)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("pointgeope ablate: error: ") and message in err[0], err
    assert not (tmp_path / "abl").exists()


def test_a_fold_outside_folds_json_is_named(two_folds, tmp_path):
    """The message of train's --test-area (data.folds.fold_of): the folds' test areas, and what to do."""
    with pytest.raises(Exception) as err:
        plan(DEMO_CONFIG, ["rpe"], [0], 5, tmp_path, [f"data.root={two_folds}"], 1)
    assert str(err.value) == (f"--test-area 5: {two_folds / 'folds.json'} has folds [1, 2] (test areas Area_1, "
                              "Area_2); pick one of them, or run `pointgeope prepare` on raw data that holds Area_5")


def test_plan_orders_trials_and_shares_the_threads(two_folds, unpinned_config, tmp_path):
    trials, common = plan(unpinned_config, ["none", "rpe"], [3, 1], 1, tmp_path, [f"data.root={two_folds}"], 2)
    assert [(t.preset, t.seed, t.folder) for t in trials] == [
        ("none", 3, tmp_path / "none" / "seed_3"), ("none", 1, tmp_path / "none" / "seed_1"),
        ("rpe", 3, tmp_path / "rpe" / "seed_3"), ("rpe", 1, tmp_path / "rpe" / "seed_1")]
    assert common == [f"data.root={two_folds}", f"train.threads={max(1, (os.cpu_count() or 1) // 2)}"]
    assert trials[0].overrides(common)[-3:] == ["model.pe=none", "train.seed=3",
                                                f"train.run_dir={tmp_path / 'none' / 'seed_3'}"]
    _, common = plan(unpinned_config, ["rpe"], [0], 1, tmp_path, [f"data.root={two_folds}", "train.threads=1"], 2)
    assert common == [f"data.root={two_folds}", "train.threads=1"]           # the user's choice is kept


@pytest.mark.slow
def test_trials_run_resume_and_a_failed_one_is_reported(grid, two_folds, tmp_path, capsys, trials_forked):
    """The grid's four trials (two at a time) each reported with its own metrics.json and seed; a rerun
    (of a copy) of rpe with seeds 0 and 7 skips seed 0, names seed 7's failure and the trials of the other grid
    (none's among them: a preset outside the command is named as a seed outside it is)."""
    report = json.loads((grid / "report" / "fold_1" / "ablation.json").read_text())
    assert [v["name"] for v in report["variants"]] == ["rpe", "none"]
    for variant in report["variants"]:
        assert variant["seeds"] == [0, 1] and variant["missing"] == [] and variant["folds"] == ["Area_1"]
        for seed, entry in zip((0, 1), variant["runs"], strict=True):
            metrics = json.loads((grid / variant["name"] / f"seed_{seed}" / "area_1" / "metrics.json").read_text())
            assert metrics["pe"] == variant["name"] and entry["miou"] == pytest.approx(metrics["miou"])
            config = (grid / variant["name"] / f"seed_{seed}" / "area_1" / "config.yaml").read_text()
            assert f"seed: {seed}\n" in config
        assert variant["miou"]["mean"] == pytest.approx(sum(r["miou"] for r in variant["runs"]) / 2)
    md = (grid / "report" / "fold_1" / "ablation.md").read_text()
    assert md.startswith("# Ablation: rpe, none x seeds 0, 1, fold 1\n\nCommand: `pointgeope ablate --config ")
    # again, with a seed whose fold folder cannot be made: seed 0 is skipped, seed 7 fails and is named
    run = copy_trials(grid, tmp_path / "abl", "rpe", "none")
    capsys.readouterr()
    (run / "rpe" / "seed_7").mkdir(parents=True)
    (run / "rpe" / "seed_7" / "area_1").write_text("not a folder")
    assert cli(ablate_args(two_folds, run, "train.epochs=1", presets=("rpe",), seeds=("0", "7"), jobs="2")) == 1
    out, err = capsys.readouterr()
    assert "rpe seed 0: done" in out and "rpe seed 7: FAILED (exit code" in out
    assert (f"{run} also holds trials of fold 1 outside this command's grid, not in its report: none seed 0, "
            "none seed 1, rpe seed 1") in out
    assert "1 trial failed: rpe seed 7" in err
    assert "is complete, skipped" in (run / "rpe" / "seed_0" / "train.log").read_text()
    md = (run / "report" / "fold_1" / "ablation.md").read_text()
    assert "- rpe: seed 7 missing (" in md
    assert ("Not reported (trials of another grid in this folder): none seed 0, none seed 1, rpe seed 1. "
            in md.split("\n\n| ")[0])
    assert json.loads((run / "report" / "fold_1" / "ablation.json").read_text())["variants"][0]["seeds"] == [0]


@pytest.mark.slow
def test_each_fold_has_its_own_report_and_a_rerun_reports_no_stale_result(grid, two_folds, tmp_path, capsys,
                                                                          trials_forked):
    """Fold 2 into the RUN of fold 1 (a copy of the grid's rpe seed 0 and report): its report scores area_2
    alone (it pooled every fold the trial folders held, under the header "fold 2") and fold 1's report stays (it
    was overwritten). A rerun with another eval value: the skipped trial's old test is named stale, not scored
    under the new header, and one tested again with it (seed 1, by the `pointgeope evaluate` the stale note
    names) is scored; with another train value ablate refuses before any trial starts (train would refuse each
    one), naming what to do."""
    run, one = copy_trials(grid, tmp_path / "abl", "rpe/seed_0", "rpe/seed_1", "report"), ("train.epochs=1",)
    fold_1 = (run / "report" / "fold_1" / "ablation.md").read_text()
    assert cli(ablate_args(two_folds, run, *one, presets=("rpe",), seeds=("0",), area="2")) == 0
    assert (run / "report" / "fold_1" / "ablation.md").read_text() == fold_1
    variant = json.loads((run / "report" / "fold_2" / "ablation.json").read_text())["variants"][0]
    metrics = json.loads((run / "rpe" / "seed_0" / "area_2" / "metrics.json").read_text())
    assert variant["folds"] == ["Area_2"] and variant["runs"][0]["miou"] == pytest.approx(metrics["miou"])
    assert cli(["evaluate", str(run / "rpe" / "seed_1" / "area_1"), "eval.max_fragments=1"]) == 0
    capsys.readouterr()
    assert cli(ablate_args(two_folds, run, *one, "eval.max_fragments=1", presets=("rpe",))) == 1
    variant = json.loads((run / "report" / "fold_1" / "ablation.json").read_text())["variants"][0]
    assert variant["seeds"] == [1] and variant["missing"][0]["seed"] == 0
    assert variant["missing"][0]["reason"].startswith(
        "stale: its test did not use this command's eval.max_fragments=1 (it used 2)")
    assert "1 trial not reported, its saved result is stale: rpe seed 0" in capsys.readouterr().err
    assert cli(ablate_args(two_folds, run, "train.epochs=2", presets=("rpe",), seeds=("0",))) == 2
    last_line_only(capsys.readouterr().err, f"pointgeope ablate: error: --run-dir {run}: 1 of the 1 trial was "
                   "trained with other settings than this command's (rpe seed 0: train.epochs: it used 1, now 2), "
                   f"and train neither resumes nor reuses such a fold: give another --run-dir, or delete "
                   f"{run / 'rpe' / 'seed_0' / 'area_1'} to train it again with these settings")


def test_engine_code_does_not_import_later_layers():
    """Data flows one way (... -> engine -> report -> viz): no module of pointgeope/engine imports the
    report, the viewer or the commands, not even inside a function (the ablation's command hands the
    report writer in)."""
    import pointgeope.engine
    from tests.conftest import module_imports

    imports = module_imports(pointgeope.engine)
    assert len(imports) >= 10
    for path, name in ((path, name) for path, names in imports.items() for name in names):
        assert not name.startswith(("pointgeope.report", "pointgeope.viz", "pointgeope.commands")), \
            f"{path}: imports {name}"


@pytest.mark.slow
@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_sigterm_stops_the_running_trial_and_starts_no_other(two_folds, tmp_path, sigint):
    """SIGTERM to ablate (a job scheduler's stop) ended ablate alone: its running trial went on training.
    Now the trial is stopped as Ctrl-C stops it (its lock released; a training stopped mid-epoch keeps its
    last.pt: tests/engine/test_run_folder.py), no further trial starts, and ablate ends with one line and exit
    code 143 (128 + SIGTERM); so too when ablate was started with SIGINT ignored (`ablate ... &` in a job
    script), where ablate waited a minute for trials that ignored the SIGINT it sent them, then killed them.
    The stop is sent once the trial holds its fold's lock (before its first epoch, often while it imports the
    training stack)."""
    import signal
    import subprocess
    import time

    run = tmp_path / "abl"
    argv = [sys.executable, "-m", "pointgeope", *ablate_args(two_folds, run, "train.epochs=1000", seeds=("0",))]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=ignore_sigint if sigint == "ignored" else None)  # noqa: PLW1509
    lock, pid = run / "rpe" / "seed_0" / "area_1" / ".lock", None
    try:
        deadline = time.monotonic() + 120
        while pid is None:  # the trial holds its fold (its SIGTERM handler set): no epoch needs to end first
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            with contextlib.suppress(FileNotFoundError, ValueError):
                pid = json.loads(lock.read_text())["pid"]
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 143
        last_line_only(err, "pointgeope ablate: terminated")
        assert process_ended(pid)                                 # the trial has ended too
        assert not lock.exists() and not (run / "none").exists()  # released; the next trial never started
        assert (run / "rpe" / "seed_0" / "train.log").read_text().rstrip().endswith("pointgeope train: terminated")
    finally:
        for p in (proc.pid, pid):
            if p is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p, signal.SIGKILL)
        proc.wait()



def test_a_run_dir_from_home_holds_the_trials_and_their_report(grid, two_folds, tmp_path, monkeypatch, trials_forked):
    """ablate --run-dir '~/abl' (quoted, or zsh's --run-dir=~/abl, which zsh leaves as it is): a config's leading
    ~ is the home folder, so the trial trained in ~/abl while ablate looked for it in ./~/abl and reported
    'none of the 1 trial(s) has a result of fold 1'. Here ~/abl holds a copy of the grid's trained trial: the
    trial's train finds it complete there, and ablate reports it from there."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    abl = copy_trials(grid, tmp_path / "home" / "abl", "rpe/seed_0")      # trained: the trial skips it
    assert cli(ablate_args(two_folds, "~/abl", "train.epochs=1", presets=("rpe",), seeds=("0",))) == 0
    assert "is complete, skipped" in (abl / "rpe" / "seed_0" / "train.log").read_text()
    assert (abl / "report" / "fold_1" / "ablation.md").is_file()
    assert not (tmp_path / "~").exists()


def test_the_report_names_the_torch_threads_its_trials_were_trained_with(grid, two_folds, tmp_path, trials_forked):
    """The scores depend on the torch CPU thread count (its kernels split their sums by thread), and a rerun
    reports a trial complete from an earlier run whatever count it had (``train.threads`` is no setting a
    result is stale by): the header named the count only where the command's overrides held it, so a report
    of trials trained at 2 threads and at 1 (the demo config's) read as one setting's. It names the count
    each reported trial's last.pt was written with: the grid's, all trained with the demo config's 1 thread (no
    override names it), that one; every count where they differ (a copy of the grid's rpe seed 0 whose last.pt
    says 2, as a training with train.threads=2 writes it: tests/engine/test_state.py, test_run_folder.py)."""
    import torch

    assert "Trained with 1 torch CPU thread. " in (grid / "report" / "fold_1" / "ablation.md").read_text()
    run = copy_trials(grid, tmp_path / "abl", "rpe/seed_0", "none/seed_0")
    last = run / "rpe" / "seed_0" / "area_1" / "last.pt"
    ckpt = torch.load(last, weights_only=True)
    ckpt["threads"] = 2
    torch.save(ckpt, last)
    assert cli(ablate_args(two_folds, run, "train.epochs=1", presets=("rpe", "none"), seeds=("0",))) == 0
    md = (run / "report" / "fold_1" / "ablation.md").read_text()
    assert "| rpe | 1 |" in md and "| none | 1 |" in md                         # both reported
    assert "Trained with torch CPU threads 1, 2 (the trials differ: their scores are not one setting's). " in md


@pytest.mark.parametrize("holds, what", [
    ("area_1", "area_1/, the fold folder of a training (pointgeope train writes RUN/area_K)"),
    ("folds.json", "folds.json, a prepared data folder"),
    ("Area_3.h5", "Area_3.h5, a prepared data folder"),
    ("manifest.json", "manifest.json, a prepared data folder")])
def test_a_run_dir_of_another_command_is_refused(two_folds, tmp_path, holds, what):
    """ablate --run-dir of a training's run folder (or a trial's, or the prepared data) wrote its trials and
    report among that command's outputs without a word; a prepared data folder is what train refuses too
    (folds.json, manifest.json or an Area_N.h5: ablate refused folds.json alone, and wrote its trials among an
    area file or a manifest copied in by hand)."""
    from pointgeope.errors import UserError

    run = tmp_path / "run"
    (run / holds).mkdir(parents=True) if holds.startswith("area_") else run.mkdir()
    if holds == "manifest.json":
        (run / holds).write_text("{}")
    elif not holds.startswith("area_"):
        shutil.copy(two_folds / holds, run / holds)
    with pytest.raises(UserError) as err:
        plan(DEMO_CONFIG, ["rpe"], [0], 1, run, [f"data.root={two_folds}", *TINY], 1)
    assert str(err.value) == (f"--run-dir {run}: it holds {what}; an ablation writes RUN/<preset>/seed_<s>/area_K and "
                              "RUN/report/fold_K, which would mix with that: give it a folder of its own, e.g. "
                              f"--run-dir {tmp_path / 'run_ablation'}")
    assert [p.name for p in run.iterdir()] == [holds]                     # nothing written


@pytest.mark.slow
def test_a_trial_stopped_by_epochs_per_run_is_named_unfinished_and_the_rerun_continues_it(two_folds, tmp_path, capsys,
                                                                                            trials_forked):
    """train.epochs_per_run=1 of 2: each trial ended with exit code 0 before its last epoch; ablate said "done"
    and its report named the trial missing for "no metrics.json", without a word that a rerun continues it
    (and returned 0 where another trial had finished)."""
    from pointgeope.engine.ablation import UNFINISHED, _left_out

    run = tmp_path / "abl"
    args = ablate_args(two_folds, run, "train.epochs=2", "train.epochs_per_run=1", presets=("rpe",), seeds=("0",))
    assert cli(args) == 1                                       # not bad input (2): the rerun continues it
    captured = capsys.readouterr()
    last_line_only(captured.err, "1 trial stopped before its last epoch (train.epochs_per_run): "
                   "rpe seed 0; rerun the same command to continue it; no report until one finishes")
    assert f"1 trial (1 preset x 1 seed) of fold 1, 1 at a time, in {run}" in captured.out.splitlines()
    assert not (run / "report").exists()
    trials, _ = plan(DEMO_CONFIG, ["rpe", "none"], [0], 1, run, [f"data.root={two_folds}", *TINY], 1)
    assert _left_out(trials, [0, 0], 1) == ({("rpe", 0): UNFINISHED}, {})     # none seed 0: nothing saved
    assert cli(args) == 0                                                       # the rerun finishes it
    metrics = json.loads((run / "rpe" / "seed_0" / "area_1" / "metrics.json").read_text())
    assert metrics["complete"] and metrics["trained_epochs"] == 2
    assert json.loads((run / "report" / "fold_1" / "ablation.json").read_text())["variants"][0]["seeds"] == [0]


@pytest.mark.slow
def test_a_trial_refused_with_trains_force_advice_names_ablates_way(grid, two_folds, tmp_path, capsys, trials_forked):
    """A trial refused by train with "--force retrains the fold" (here its last.pt deleted) was reported with
    that advice alone, which ablate cannot follow: ablate has no --force."""
    run = copy_trials(grid, tmp_path / "abl", "rpe/seed_0")
    args = ablate_args(two_folds, run, "train.epochs=1", presets=("rpe",), seeds=("0",))
    fold = run / "rpe" / "seed_0" / "area_1"
    (fold / "last.pt").unlink()
    capsys.readouterr()
    assert cli(args) == 2
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("rpe seed 0: FAILED"))
    assert "--force retrains the fold" in line
    assert line.endswith(f"(ablate has no --force: delete {fold} to train the trial again) in "
                         f"{line.rsplit(' in ', 1)[1]}")


@pytest.mark.slow
def test_ablates_way_to_trains_force_follows_the_refusal_not_the_words(grid, two_folds, tmp_path, capsys,
                                                                       trials_forked):
    """ablate added its way to train's --force where the failure's line held the text "--force": a trial whose
    last.pt is damaged (train: "delete it to start the fold again", no "--force") went without it, and a
    failure of another kind in a run folder whose name holds "--force" got it. train now notes the fold folder
    of a refusal that --force ends (pointgeope.engine.retrain), and ablate names that folder; deleting it (ablate's
    way) trains the trial again."""
    run = copy_trials(grid, tmp_path / "abl--force", "rpe")
    args = ablate_args(two_folds, run, "train.epochs=1", presets=("rpe",), seeds=("0", "1"))
    damaged, other = run / "rpe" / "seed_0" / "area_1", run / "rpe" / "seed_1" / "area_1"
    (damaged / "last.pt").write_bytes((damaged / "last.pt").read_bytes()[:1000])     # cut short
    shutil.rmtree(other)
    other.write_text("not a folder")                                                 # refused, but not for --force
    capsys.readouterr()
    assert cli(args) == 2
    lines = {line.split(":")[0]: line for line in capsys.readouterr().out.splitlines() if ": FAILED (exit code" in line}
    assert lines["rpe seed 0"].endswith(f"(ablate has no --force: delete {damaged} to train the trial again) in "
                                        f"{lines['rpe seed 0'].rsplit(' in ', 1)[1]}")
    assert "not a readable checkpoint" in lines["rpe seed 0"]
    assert str(other) in lines["rpe seed 1"] and "ablate has no --force" not in lines["rpe seed 1"]
    assert sorted(p.name for p in (run / "rpe" / "seed_0").iterdir()) == ["area_1", "train.log"]   # no note left
    shutil.rmtree(damaged)                                                           # ablate's way: it trains again
    assert cli(ablate_args(two_folds, run, "train.epochs=1", presets=("rpe",), seeds=("0",))) == 0
    assert (damaged / "metrics.json").is_file()


def test_a_set_whose_every_trial_is_unfinished_exits_1_without_an_error(two_folds, tmp_path, capsys, monkeypatch):
    """train.epochs_per_run stops every trial alike (a job array's chunked run): ablate said "error: none of
    the trials has a result" and exited 2, the code of bad input, where the docs give 1 for unfinished trials
    and the same command continues them. Each trial's training is replaced by what such a stop leaves: a
    ``last.pt`` and no ``metrics.json``."""
    from pointgeope.engine import ablation

    def stopped_early(trials, argvs, jobs, test_area):
        for trial in trials:
            (trial.folder / "area_1").mkdir(parents=True)
            (trial.folder / "area_1" / "last.pt").write_bytes(b"a checkpoint")
        return [0] * len(trials)

    reported = []
    monkeypatch.setattr(ablation, "_run_all", stopped_early)
    run = tmp_path / "abl"
    code = ablation.ablate(DEMO_CONFIG, ["rpe", "none"], [0], 1, run, [f"data.root={two_folds}", *TINY],
                           lambda *args: reported.append(args))
    assert code == 1 and reported == []                         # nothing to score: no report, no error
    last_line_only(capsys.readouterr().err, "2 trials stopped before their last epoch (train.epochs_per_run): "
                   "rpe seed 0, none seed 0; rerun the same command to continue them; no report until one finishes")
