"""The report's tables: markdown (like the paper's), CSV and JSON, for one run or several side by side.

Several runs share one table; rows after the first run's carry the differences to the first run
(``geope - rpe``), computed from the unrounded scores, in percentage points. Scores are fractions in
:mod:`pointgeope.metrics`; the markdown and CSV show them in %, the JSON keeps the fractions (NaN -> null).
"""
from __future__ import annotations

import csv
import io
import math
from decimal import ROUND_HALF_UP, Decimal

import numpy as np

from pointgeope.constants import AREAS, CLASS_NAMES
from pointgeope.decimals import decimal_difference
from pointgeope.metrics import CLASS_MEAN_TEXT
from pointgeope.plural import counted
from pointgeope.recorded_text import setting_text
from pointgeope.report.citation import citation_json, citation_lines
from pointgeope.report.machine import machine_json, machine_note, runs_machine_note
from pointgeope.report.runs import RunSummary
from pointgeope.report.settings import SEED, run_differences, value_groups

JSON_VERSION = 1
MEANS = ("oa", "macc", "miou")
HEAD = {"oa": "OA", "macc": "mAcc", "miou": "mIoU"}
# the two 6-fold numbers: (key, RunSummary attribute, title)
KINDS = (
    ("pooled", "pooled", "pooled over the test areas"),   # + " (standard 6-fold number)" of six folds
    ("mean_of_folds", "mean_of_folds", "mean of the per-fold scores"),
)


def pct(value: float, digits: int, signed: bool = False, missing: str = "—") -> str:
    """A fraction as a percentage with ``digits`` decimals (``signed``: with its sign), ``missing`` for NaN/None.

    Rounded half up (away from zero) from the fraction's decimal value, its shortest ``repr`` (the decimal that
    a ratio of counts such as 23/80 = 0.2875 is): 28.75 % -> ``28.8``, as by hand from the JSON's fractions.
    ``f"{100 * value:.1f}"`` rounded the binary product instead, which sends exact ties either way (23/80 ->
    28.7, 49/80 -> 61.3). Every percentage of the report (tables, CSV, figures, ablation) is made here."""
    if value is None or math.isnan(value):
        return missing
    percent = (Decimal(repr(float(value))) * 100).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP)
    return f"{percent:+.{digits}f}" if signed else f"{percent:.{digits}f}"


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|")


def _row(cells) -> str:
    return "| " + " | ".join(_cell(c) for c in cells) + " |"


def _score_cells(s: dict, digits: int, signed: bool = False) -> list[str]:
    return [pct(s[k], digits, signed) for k in MEANS] + [pct(v, digits, signed) for v in s["iou"]]


def difference(later: dict, first: dict) -> dict:
    """``later - first`` for ``oa``, ``macc``, ``miou`` and per class ``iou`` / ``acc`` (fractions, each the
    :func:`decimal_difference` of the two scores)."""
    out = {k: decimal_difference(later[k], first[k]) for k in MEANS}
    for key in ("iou", "acc"):
        out[key] = [decimal_difference(a, b) for a, b in zip(later[key], first[key], strict=True)]
    return out


MIXED_RULES = ("- the runs average their classes by different rules: their mAcc and mIoU differences mix them "
               "(pass --class-mean).")


def class_mean_lines(runs: list[RunSummary], mixed: str = MIXED_RULES) -> list[str]:
    """The rule of the class means, said once when the runs share it, per run (and flagged, with ``mixed``:
    what to do, which the caller's command can do) when not."""
    rules = {run.class_mean for run in runs}
    if not rules:
        return []
    if len(rules) == 1:
        rule = rules.pop()
        return [f"Class means (`eval.class_mean: {rule}`): {CLASS_MEAN_TEXT[rule]}."]
    return [f"- {run.name}: `eval.class_mean: {run.class_mean}`, {CLASS_MEAN_TEXT[run.class_mean]}" for run in runs] \
        + [mixed]


DATA_KEYS = ("data.files.", "data.points.")  # the checksums of the area files, of their points
SHOWN_KEYS = 8  # keys a note names, then how many more (report.json's run_differences has them all)


def differences_of_runs(runs: list[RunSummary]) -> dict[str, dict[str, object]]:
    """``{key: {run name: value}}`` of the settings the runs side by side differ in (their folds' shared
    settings, compared as a run's folds are: :func:`~pointgeope.report.settings.run_differences`)."""
    return run_differences({run.name: run.settings for run in runs}) if len(runs) > 1 else {}


def run_difference_lines(runs: list[RunSummary]) -> list[str]:
    """The notes on what the runs side by side were trained and tested with differently, so that a difference
    of their scores is read as the effect of those keys alone: one line per key (at most :data:`SHOWN_KEYS`),
    the data's checksums in one line of their own (unlike data: their scores compare unlike test sets); a run
    that records no settings is named as not compared (no note must not read as runs alike)."""
    differ = differences_of_runs(runs)
    data = sorted({key.split(".", 2)[2] for key in differ if key.startswith(DATA_KEYS)})
    keys = [key for key in differ if not key.startswith(DATA_KEYS)]
    unknown = [run.name for run in runs if not run.settings] if len(runs) > 1 else []
    lines = [(f"- {', '.join(unknown)}: no settings recorded (no `config` in its folds' metrics.json, no "
              "config.yaml beside them): not compared with the other runs' settings, which may differ in any key.")
             ] if unknown else []
    if keys == [SEED] and not data and not unknown and len({tuple(run.areas) for run in runs}) == 1:
        # (runs of other folds differ in their test sets too: a note of their own says so)
        return [f"- the runs differ in their seed alone (`{SEED}`: " + "; ".join(
            f"{name} `{setting_text(value)}`" for name, value in differ[SEED].items()) + "): their differences are "
            "the spread between seeds of one method, not an effect (`pointgeope ablate` gives mean ± std over "
            "seeds)."]
    said = {key: "; ".join(f"{name} `{setting_text(value)}`" for name, value in differ[key].items()) for key in keys}
    if len(keys) == 1:
        lines.append(f"- the runs were trained or tested with one setting apart: `{keys[0]}` ({said[keys[0]]}).")
    elif keys:
        lines.append("- the runs were trained or tested with different settings (their differences are the "
                     "effect of all of these):")
        lines += [f"  - `{key}`: {said[key]}" for key in keys[:SHOWN_KEYS]]
        if len(keys) > SHOWN_KEYS:
            more = counted(len(keys) - SHOWN_KEYS, "more key", "more keys")
            lines.append(f"  - and {more} (report.json: `run_differences`)")
    if data:
        lines.append(f"- the runs read different data (the checksums of {', '.join(data)} differ): their "
                     "differences compare unlike data sets.")
    return lines


def diff_name(run: RunSummary, first: RunSummary) -> str:
    return f"{run.name} - {first.name}"


def six_folds(runs: list[RunSummary]) -> bool:
    """Whether every run covers all six folds: the tables hold 6-fold numbers."""
    return all(len(run.folds) == len(AREAS) for run in runs)


def data_name(names: tuple[str, ...], runs: list[RunSummary]) -> str:
    """The titles' data set and folds: ``"S3DIS 6-fold"`` where every run covers the six folds; where not,
    what they cover, ``"S3DIS Area_5"`` (one fold: the Area 5 protocol), ``"S3DIS, 4 of 6 folds (Area_1, ...)"``
    (the runs' same folds) or ``"S3DIS, the folds of column *folds*"``, so that a table of fewer folds is never
    titled a 6-fold number. Without ``S3DIS`` for a network of one's own classes (its labels are not S3DIS's)."""
    data = "S3DIS" if tuple(names) == CLASS_NAMES else ""
    areas = {tuple(run.areas) for run in runs}
    if six_folds(runs):
        scope, joined = "6-fold", " "
    elif len(areas) > 1:
        scope, joined = "folds per run (column *folds*)", ", "
    else:
        (covered,) = areas
        scope, joined = ((covered[0], " ") if len(covered) == 1 else
                         (f"{len(covered)} of {len(AREAS)} folds ({', '.join(covered)})", ", "))
    return data + joined + scope if data else scope


def report_title(runs: list[RunSummary]) -> str:
    """``report.md``'s title: ``"S3DIS 6-fold cross-validation report"``, else ``"S3DIS report: Area_5"`` (what
    :func:`data_name` says the runs cover; ``"Report: ..."`` for a network of one's own classes)."""
    names = runs[0].class_names
    if six_folds(runs):
        return f"{data_name(names, runs)} cross-validation report"
    s3dis = tuple(names) == CLASS_NAMES
    return ("S3DIS report: " if s3dis else "Report: ") + data_name(names, runs).removeprefix("S3DIS").lstrip(", ")


def _folds_cell(run: RunSummary) -> str:
    return f"{len(run.folds)}/{len(AREAS)}"


def summary_markdown(runs: list[RunSummary], digits: int = 1) -> str:
    """The main tables (pooled and mean of folds, runs side by side with differences) and the notes."""
    names = runs[0].class_names  # the runs' classes (load_runs: the same)
    header = ["run", "folds"] + [HEAD[k] for k in MEANS] + list(names)
    align = "|:--|:-:|" + "--:|" * (len(MEANS) + len(names))
    lines = []
    for key, attr, title in KINDS:
        title += " (standard 6-fold number)" if key == "pooled" and six_folds(runs) else ""
        lines += [f"**{data_name(names, runs)}, {title}, %**", "", _row(header), align]
        first = getattr(runs[0], attr)
        for run in runs:
            lines.append(_row([run.name, _folds_cell(run)] + _score_cells(getattr(run, attr), digits)))
        for run in runs[1:]:
            d = difference(getattr(run, attr), first)
            lines.append(_row([diff_name(run, runs[0]), ""] + _score_cells(d, digits, signed=True)))
        lines.append("")
    rules = class_mean_lines(runs)
    lines += rules[:1] + [""] if len(rules) == 1 else []
    notes = [] if len(rules) == 1 else rules
    for run in runs:
        if run.missing:
            notes.append(f"- {run.name}: {run.missing_text()}; pooled over {run.pooled_over_text()}.")
        if run.unreported:
            notes.append(f"- {run.name}: {run.unreported_text()}.")
        if run.mixed:
            notes.append(f"- {run.name}: mixed settings (pooled with --allow-mixed): its folds differ in")
            notes += [f"  - `{key}`: " + "; ".join(f"{areas} `{setting_text(value)}`"
                                                   for areas, value in value_groups(v))
                      for key, v in run.mixed.items()]
        if note := machine_note(run.name, run.machines):
            notes.append(note)
    if len({tuple(r.areas) for r in runs}) > 1:
        notes.append("- the runs cover different folds: their differences compare unlike test sets.")
    notes += run_difference_lines(runs)
    if len(runs) > 1 and (note := runs_machine_note({run.name: run.machines for run in runs})):
        notes.append(note)
    if notes:
        lines += ["Notes:", ""] + notes + [""]
    return "\n".join(lines)


def per_fold_markdown(run: RunSummary, digits: int = 1) -> str:
    """One row per test area (missing ones say why), then the pooled and the mean-of-folds rows."""
    names = run.class_names
    header = ["fold", "points"] + [HEAD[k] for k in MEANS] + list(names)
    align = "|:--|--:|" + "--:|" * (len(MEANS) + len(names))
    lines = [f"**{run.name}: per fold, %**", "", _row(header), align]
    for area, f, why in run.by_area():
        if f is not None:
            lines.append(_row([area, f"{f.num_points:,}"] + _score_cells(f.scores, digits)))
        else:
            lines.append(_row([area, f"missing ({why})"] + [""] * (len(MEANS) + len(names))))
    lines.append(_row([f"pooled ({counted(len(run.folds), 'fold')})", f"{run.num_points:,}"]
                      + _score_cells(run.pooled, digits)))
    lines.append(_row([f"mean of folds ({len(run.folds)})", ""] + _score_cells(run.mean_of_folds, digits)))
    return "\n".join(lines) + "\n"


def full_markdown(runs: list[RunSummary], digits: int = 1) -> str:
    """``report.md``: title, how the numbers are made, the summary tables and every run's per-fold table."""
    parts = [
        f"# {report_title(runs)}",
        "",
        ("*Pooled*: scores of the summed confusion matrices of the test areas, over the six folds the standard "
         "6-fold number (Pointcept `tools/test_s3dis_6fold.py`). *Mean of folds*: the mean of each test area's "
         "own scores (every area weighs the same). Per-class columns are IoU. A class with neither ground truth "
         "nor prediction is `—`; the rule of the class means is said below the tables. Differences are later "
         "runs minus the first, in percentage points, from the unrounded scores."),
        "",
        "Runs: " + ", ".join(f"{r.name} (`{r.path}`)" for r in runs),
        "",
        summary_markdown(runs, digits),
        "## What made the numbers",
        "",
        *[line for run in runs for line in [*citation_lines(run), ""]],
        "## Per fold",
        "",
    ]
    parts += [per_fold_markdown(run, digits) for run in runs]
    return "\n".join(parts)


# --- CSV ---------------------------------------------------------------------------------------------------

def csv_header(class_names=CLASS_NAMES) -> list[str]:
    """The CSV's columns: the run, the table, then the means and one ``iou_pct_<name>`` per class."""
    return (["run", "table", "areas", "status", "points", "oa_pct", "macc_pct", "miou_pct"]
            + [f"iou_pct_{name}" for name in class_names])


def _csv_scores(s: dict) -> list[str]:
    return [pct(v, 4, missing="") for v in [s[k] for k in MEANS] + list(s["iou"])]


def csv_text(runs: list[RunSummary]) -> str:
    """One row per (run, table): ``pooled``, ``mean_of_folds``, each area (``fold``), and the differences."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(csv_header(runs[0].class_names))
    empty = [""] * (len(MEANS) + len(runs[0].class_names))
    for run in runs:
        folds = ";".join(run.areas)
        w.writerow([run.name, "pooled", folds, "ok", run.num_points] + _csv_scores(run.pooled))
        w.writerow([run.name, "mean_of_folds", folds, "ok", ""] + _csv_scores(run.mean_of_folds))
        for area, f, why in run.by_area():
            if f is not None:
                w.writerow([run.name, "fold", area, "ok", f.num_points] + _csv_scores(f.scores))
            else:
                w.writerow([run.name, "fold", area, f"missing: {why}", ""] + empty)
    for run in runs[1:]:
        for key, attr, _ in KINDS:
            d = difference(getattr(run, attr), getattr(runs[0], attr))
            w.writerow([diff_name(run, runs[0]), f"difference_{key}", "", "ok", ""] + _csv_scores(d))
    return buf.getvalue()


# --- JSON --------------------------------------------------------------------------------------------------

def json_safe(value):
    """NaN -> None (JSON has no NaN), numpy scalars -> Python numbers, recursively."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, np.ndarray):
        return json_safe(value.tolist())
    if isinstance(value, (float, np.floating)):
        return None if math.isnan(value) else float(value)
    if isinstance(value, np.integer):
        return int(value)
    return value


def json_report(runs: list[RunSummary]) -> dict:
    """Everything in the tables, as fractions, plus each run's pooled confusion matrix."""
    out = {"version": JSON_VERSION, "class_names": list(runs[0].class_names), "runs": [], "differences": []}
    for run in runs:
        out["runs"].append({
            "name": run.name,
            "path": str(run.path),
            "folds": run.areas,
            "folds_missing": [{"area": a, "reason": r} for a, r in run.missing],
            "folds_unreported": run.unreported,  # fold folders beyond area_1..area_6 (not in the scores)
            "num_points": run.num_points,
            "class_mean": run.class_mean,
            "mixed_settings": run.mixed,  # {key: {area: value}} of settings its folds differ in (--allow-mixed)
            "machines": machine_json(run.machines),  # where each fold was trained and tested (report/machine.py)
            "made_by": citation_json(run),  # its code, config, data and machines (report/citation.py)
            "pooled": run.pooled,
            "mean_of_folds": run.mean_of_folds,
            "pooled_confusion": run.confusion,
            "per_fold": [{"area": f.area, "fold": f.fold, "metrics": str(f.path), "metrics_sha256": f.sha256,
                          "num_points": f.num_points, "confusion": f.confusion, **f.scores} for f in run.folds],
        })
    out["run_differences"] = differences_of_runs(runs)  # {key: {run: value}} of the settings the runs differ in
    for run in runs[1:]:
        out["differences"].append({
            "run": run.name, "baseline": runs[0].name,
            **{key: difference(getattr(run, attr), getattr(runs[0], attr)) for key, attr, _ in KINDS},
        })
    return json_safe(out)
