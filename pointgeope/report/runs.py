"""Read the per-fold results of a 6-fold run and summarise them: pooled, mean of folds, missing folds.

A run folder holds one sub-folder per fold, each with the fold's ``metrics.json`` (written by
:func:`pointgeope.engine.evaluate.evaluate_fold`; the keys read here are shown)::

    RUN/area_1/metrics.json     {"area": "Area_1", "fold": 1, "class_names": [...],
    ...                          "confusion": [[...C x C...]], "complete": true, ...}
    RUN/area_6/metrics.json

``class_names`` are the run's ``C`` classes: S3DIS's 13 (also where a file written before the key has none),
or those of a network of ``model.num_classes`` classes of one's own (``constants.class_names``). The folds
of a run, and runs compared side by side, must have the same class names.

The confusion matrix is the source of truth: every score here is recomputed from it with
:mod:`pointgeope.metrics`, the stored ``oa`` / ``miou`` / ... are not read. A fold counts only when its
file exists and says ``"complete": true`` of the predictions beside it (not a test stopped between its
two writes: :func:`~pointgeope.engine.fold_result.pair_problem`) and no other process holds the fold folder's
lock (a training or a test at work there, whose result replaces the file; a lock of another host, which
cannot be checked from here, counts as held: :func:`~pointgeope.lock.live_writer`); the others are listed
with the reason, never dropped silently.
The class means follow the rule the folds were evaluated with (``"class_mean"`` in ``metrics.json``, the
run's ``eval.class_mean``; ``"present"`` in files written before the key existed, the rule they used), or
the one the report is asked for (``pointgeope report --class-mean``).
"""
from __future__ import annotations

import dataclasses
import socket
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pointgeope import json_text
from pointgeope.constants import AREAS, CLASS_NAMES, FOLD_NAME, fold_folder_name
from pointgeope.lock import LOCK_NAME, live_writer
from pointgeope.metrics import CLASS_MEANS, mean_of_fold_scores, pool, scores
from pointgeope.plural import counted
from pointgeope.recorded_text import repr_bounded
from pointgeope.report.fold_file import FoldResult, ReportError, read_fold, same_class_names
from pointgeope.report.points import current_points, recover_points
from pointgeope.report.settings import again_advice, mixed_settings, mixed_text, normals_read_in_turn, run_settings

METRICS_FILE = "metrics.json"


@dataclass
class RunSummary:
    """The folds of one run and its two 6-fold numbers.

    ``pooled``: scores of the summed confusion matrices of the complete folds (the standard 6-fold number,
    Pointcept ``tools/test_s3dis_6fold.py``). ``mean_of_folds``: the mean of the folds' own scores. Both
    average the classes by ``class_mean``'s rule.
    """
    name: str
    path: Path
    folds: list[FoldResult]
    missing: list[tuple[str, str]] = field(default_factory=list)  # (area, reason)
    class_mean: str = "present"
    mixed: dict = field(default_factory=dict)  # {key: {area: value}} of the settings its folds differ in
    unreported: list[str] = field(default_factory=list)  # fold folders with metrics.json beyond area_1..6

    def unreported_text(self) -> str:
        """``"not reported: area_7 (...)"``, or ``""``: the run's folds that the six-fold report leaves out."""
        if not self.unreported:
            return ""
        return (f"not reported: {', '.join(self.unreported)} (the report covers S3DIS's six folds, "
                f"{AREAS[0]}..{AREAS[-1]}; report those folds' metrics.json on their own)")

    @property
    def settings(self) -> dict:
        """The settings its folds share (:func:`~pointgeope.report.settings.run_settings`), ``{}`` if none says."""
        return run_settings({f.area: f.settings for f in self.folds})

    @property
    def machines(self) -> dict[str, dict[str, str]]:
        """``{area: {aspect: text}}``: the machines its folds were trained and tested on (report/machine.py)."""
        return {f.area: f.machine for f in self.folds}

    @property
    def class_names(self) -> tuple[str, ...]:
        """The names of its ``C`` classes (its folds share them: :func:`load_run`)."""
        return self.folds[0].class_names if self.folds else CLASS_NAMES

    @property
    def confusion(self) -> np.ndarray:
        return pool([f.confusion for f in self.folds])

    @property
    def pooled(self) -> dict:
        return scores(self.confusion, self.class_mean)

    @property
    def mean_of_folds(self) -> dict:
        return mean_of_fold_scores([f.confusion for f in self.folds], self.class_mean)

    @property
    def areas(self) -> list[str]:
        return [f.area for f in self.folds]

    @property
    def num_points(self) -> int:
        return sum(f.num_points for f in self.folds)

    def by_area(self) -> list[tuple[str, FoldResult | None, str]]:
        """Each of the six test areas in order: ``(area, its fold, "")``, or ``(area, None, why it is missing)``."""
        folds, reasons = {f.area: f for f in self.folds}, dict(self.missing)
        return [(area, folds[area], "") if area in folds else (area, None, reasons[area]) for area in AREAS]

    def missing_text(self) -> str:
        """``"folds missing: Area_3 (no metrics.json), Area_6 (incomplete)"``, or ``""``."""
        if not self.missing:
            return ""
        return "folds missing: " + ", ".join(f"{area} ({why})" for area, why in self.missing)

    def pooled_over_text(self) -> str:
        """``"all 6 folds"`` or ``"4 of 6 folds: Area_1, Area_2, Area_4, Area_5"``."""
        if len(self.folds) == len(AREAS):
            return f"all {len(AREAS)} folds"
        return f"{len(self.folds)} of {len(AREAS)} folds: " + ", ".join(self.areas)


def fold_dir(run: Path, fold: int) -> Path:
    return Path(run) / fold_folder_name(fold)


def _class_mean(run: Path, folds: list[FoldResult], asked: str | None) -> str:
    """The rule of the run's class means: ``asked`` (its folds rescored by it), else the folds' own one."""
    if asked is not None:
        if asked not in CLASS_MEANS:
            raise ReportError(f"expected --class-mean in {CLASS_MEANS}, got {asked!r}")
        return asked
    rules = sorted({f.class_mean for f in folds})
    if len(rules) > 1:
        raise ReportError(f"{run}: its folds were evaluated with different eval.class_mean rules ({', '.join(rules)}); "
                          "pass --class-mean all or --class-mean present to score them alike")
    return rules[0] if rules else "present"


def _being_written(writer: dict, folder: Path) -> str:
    """Why a fold whose folder ``writer`` (:func:`~pointgeope.lock.live_writer`'s record) holds is left out."""
    if writer.get("host") == socket.gethostname():
        return f"being written now by pid {writer['pid']} (since {writer.get('since')}): report again once it has ended"
    return (f"locked by pid {writer['pid']} on {writer.get('host')} (since {writer.get('since')}), which cannot be "
            f"checked from here: report again once it has ended, or delete {folder / LOCK_NAME} if it has")


def load_run(run: str | Path, name: str | None = None, class_mean: str | None = None,
             allow_mixed: bool = False, fold: int | None = None) -> RunSummary:
    """Read ``RUN/area_K/metrics.json`` for K = 1..6 (other fold folders with one are named in the summary:
    ``unreported``); ``class_mean``: the rule of the class means (``None``:
    the one the folds were evaluated with); ``allow_mixed``: pool folds trained or evaluated with different
    settings (:mod:`pointgeope.report.settings`), which the summary's ``mixed`` then lists; ``fold``: read
    ``RUN/area_<fold>`` alone (an ablation of one fold), whatever other folds the folder holds.

    Raises:
        ReportError: ``run`` is not a folder, a metrics file is malformed, no fold is complete, or (without
        ``allow_mixed``) its folds' settings differ.
    """
    run = Path(run)
    if not run.is_dir():
        raise ReportError(f"{run}: expected a run folder holding area_1 .. area_{len(AREAS)}, found "
                          f"{'a file' if run.exists() else 'nothing'}")
    if FOLD_NAME.fullmatch(run.name) and (run / METRICS_FILE).is_file():   # RUN/area_K given as the run
        raise ReportError(f"{run}: a fold folder (RUN/area_K), not a run folder holding area_1 .. area_{len(AREAS)}; "
                          f"give its run folder, {run.parent}")
    ablation = sorted(run.glob("report/fold_*/ablation.md")) + sorted(run.glob("report/ablation.md"))
    if not any(run.glob("area_*")) and (ablation or any(run.glob("*/seed_*/area_*"))):  # RUN/<preset>/seed_<s>
        raise ReportError(f"{run}: an ablation's run folder (pointgeope ablate), not a training's: "
                          f"{_ablation_report(run, ablation)}; `pointgeope report {run / '<preset>' / 'seed_<s>'}` "
                          "reports one trial")
    folds, missing = [], []
    for k, area in enumerate(AREAS, start=1):
        if fold is not None and k != fold:
            continue
        path = fold_dir(run, k) / METRICS_FILE
        if writer := live_writer(path.parent):  # its result (if any) is being replaced: neither old nor new
            missing.append((area, _being_written(writer, path.parent)))
            continue
        if not path.is_file():
            exists = path.parent.is_dir()
            missing.append((area, f"no {METRICS_FILE}" if exists else f"no {path.parent.name}/ folder"))
            continue
        result, reason = read_fold(path, k)
        if result is None:
            missing.append((area, reason))
        else:
            folds.append(result)
    if folds:
        same_class_names([(f.path, f.class_names) for f in folds])
    rule = _class_mean(run, folds, class_mean)
    folds = [dataclasses.replace(f, class_mean=rule) for f in folds]
    mixed = _mixed(run, folds)
    if mixed and not allow_mixed:
        raise ReportError(f"{run}: its folds were trained or evaluated with different settings: {mixed_text(mixed)}; "
                          "one pooled number needs one method, data set and protocol: report them as separate "
                          "runs, or pass --allow-mixed to pool them with the differences written in the report"
                          + again_advice(mixed, {f.area: f.settings for f in folds},
                                       {f.area: f.path.parent for f in folds}))
    known = {fold_dir(run, k).name for k in range(1, len(AREAS) + 1)}
    unreported = [] if fold is not None else sorted(
        (p.name for p in run.glob("area_*")
         if FOLD_NAME.fullmatch(p.name) and p.name not in known and (p / METRICS_FILE).is_file()),
        key=lambda n: (len(n), n))
    summary = RunSummary(name or run.resolve().name, run, folds, missing, rule, mixed, unreported)
    if not folds:
        raise ReportError(f"{run}: no complete fold to report ({summary.missing_text()}); expected "
                          f"{run}/area_K/{METRICS_FILE} with \"complete\": true for K in "
                          + (f"{fold}" if fold is not None else f"1..{len(AREAS)}")
                          + (f"; {summary.unreported_text()}" if unreported else ""))
    return summary


def _ablation_report(run: Path, reports: list[Path]) -> str:
    """Where the report of the ablation folder ``run`` is (``reports``: its ``report/fold_K/ablation.md``, then
    an older ablate's ``report/ablation.md``, one for the folder, written before one a fold), or that it has none
    yet and how many of its trials (``<preset>/seed_<s>/area_K``) are complete."""
    if reports:
        older = reports[0].parent.name == "report"
        return f"its report is {reports[0]}" + (" (an older pointgeope's, one for the folder: its ablate command, run "
                                                "again, skips the complete trials and writes one a fold, "
                                                "report/fold_K)" if older else "")
    trials = [p for p in run.glob("*/seed_*/area_*") if FOLD_NAME.fullmatch(p.name)]
    done = sum(_says_complete(p / METRICS_FILE) for p in trials)
    if not done:
        return "no report yet (no trial has finished: rerun its ablate command to continue them)"
    return (f"no report yet ({done} of {counted(len(trials), 'trial')} complete: rerun its ablate command to "
            f"{'write it' if done == len(trials) else 'continue the others and write it'})")


def _says_complete(path: Path) -> bool:
    """Whether the metrics file ``path`` exists and says ``"complete": true`` (a count for a message: a damaged
    one is not complete)."""
    try:
        return json_text.loads(path.read_bytes()).get("complete") is True
    except (OSError, ValueError, AttributeError):
        return False


def _mixed(run: Path, folds: list[FoldResult]) -> dict[str, dict[str, object]]:
    """:func:`mixed_settings` of the folds, their points taken as their data roots' manifests list them now
    (:func:`current_points`) and, where their file checksums differ, recovered (:func:`recover_points`); one
    note names the folds whose points were so found."""
    settings = {f.area: f.settings for f in folds}
    found = current_points(settings)
    mixed = mixed_settings(settings)
    # the same points prepared in two places?
    if any(key.startswith("data.files.") for key in mixed) and (more := recover_points(settings)):
        found, mixed = found + more, mixed_settings(settings)
    if found:
        print(f"note: {run}: the folds' data compared by the points of their area files, those of "
              f"{'; '.join(found)}", flush=True)
    if normals := {key: mixed.pop(key) for key in sorted(mixed) if key.startswith("data.normals.")}:
        print(f"note: {run}: its folds read normals of different estimates, pooled (the same points, other "
              "normals): " + "; ".join(f"{key.removeprefix('data.normals.')}'s " + ", ".join(
                  f"{value} in fold {area}" for area, value in by_fold.items()) for key, by_fold in normals.items()),
              flush=True)
    for fold in folds:
        if turns := normals_read_in_turn(fold.settings):
            print(f"note: {run}: fold {fold.area} was resumed on files of another normal estimate, so its network "
                  f"trained on the normals of both: {'; '.join(turns)}", flush=True)
    return mixed


def load_runs(runs: list[str | Path], names: list[str] | None = None,
              class_mean: str | None = None, allow_mixed: bool = False) -> list[RunSummary]:
    """Load several runs; names default to the folder names, made unique with their parent folder."""
    if names is not None and len(names) != len(runs):
        raise ReportError(f"expected one name per run ({len(runs)}), got {counted(len(names), 'name')}: "
                          f"{repr_bounded(names)}")
    seen: dict[Path, str | Path] = {}
    for run in runs:  # one folder twice (a link, another spelling): a comparison of a run with itself
        if (where := Path(run).resolve()) in seen:
            same = "given twice" if str(seen[where]) == str(run) else f"and {seen[where]} are one folder ({where})"
            raise ReportError(f"expected each run once, got {run} {same}; give each run folder once")
        seen[where] = run
    if names is None:
        names = [Path(r).resolve().name for r in runs]
        if len(set(names)) < len(names):
            names = [f"{Path(r).resolve().parent.name}/{Path(r).resolve().name}" for r in runs]
    for run, name in zip(runs, names, strict=True):  # each heads its run's rows of every table, on one line
        if not (name.strip() and name.isprintable()):
            raise ReportError(f"run {run}: expected a name of visible characters on one line, got "
                              f"{repr_bounded(name, 80)} (blank or with a control character such as a newline); pass "
                              "--names with one")
    if len({" ".join(name.split()) for name in names}) < len(names):  # as a table shows them: spaces collapsed
        spaces = "" if len(set(names)) < len(names) else " (told apart by spaces alone, which a table drops)"
        raise ReportError(f"expected distinct run names, got {repr_bounded(names)}{spaces}; pass --names")
    summaries = [load_run(r, n, class_mean, allow_mixed) for r, n in zip(runs, names, strict=True)]
    same_class_names([(s.folds[0].path, s.class_names) for s in summaries])
    return summaries
