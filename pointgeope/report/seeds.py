"""Variants trained with several seeds (an ablation): each variant's mean and spread over its seeds.

Every run (one variant, one seed) is a :class:`~pointgeope.report.runs.RunSummary` scored by its pooled
confusion over the folds it covers (one fold in a short ablation). Per variant and score (OA, mAcc, mIoU)::

    mean = (1/S) sum_s x_s        std = sqrt( sum_s (x_s - mean)^2 / (S - 1) )        range = [min_s x_s, max_s x_s]

(the mean and std exact in the decimals the scores print as, then rounded once: :mod:`pointgeope.decimals`)

and against the first variant (the baseline) the difference of the means, marked *within the spread* when
the two ranges overlap (some seed of one variant scores as well as some seed of the other, scores within
1e-9 counting as equal: the +1e-10 of the ``all`` rule gives 1/13 as 0.0769230769230704 in one run and
0.0769230769229443 in another): such a difference is not shown to be real by these seeds. Written as
``ablation.md`` (tables), ``ablation.csv`` (one row per variant and score) and, last, ``ablation.json``
(fractions, every seed's scores and the files they came from, the checksums of the other two:
:func:`write_ablation`).
"""
from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pointgeope.constants import CLASS_NAMES
from pointgeope.decimals import decimal_difference, decimal_mean, decimal_std
from pointgeope.errors import UserError
from pointgeope.plural import first_of
from pointgeope.report.fold_file import ReportError, same_class_names
from pointgeope.report.runs import RunSummary, fold_dir, load_run
from pointgeope.report.tables import HEAD, MEANS, class_mean_lines, json_safe, pct

__all__ = ["Variant", "spread", "ablation_markdown", "ablation_json", "ablation_csv", "write_ablation", "write_trials"]


@dataclass
class Variant:
    """One variant (e.g. a positional encoding) and its complete runs, ``runs[i]`` trained with ``seeds[i]``;
    ``missing``: the seeds without a complete run, with the reason; ``notes``: seeds scored with a note (a
    run whose settings could not be checked)."""
    name: str
    seeds: list[int]
    runs: list[RunSummary]
    missing: list[tuple[int, str]] = field(default_factory=list)
    notes: list[tuple[int, str]] = field(default_factory=list)

    def values(self, key: str) -> np.ndarray:
        """``pooled[key]`` of every seed's run, ``(S,)``."""
        return np.array([run.pooled[key] for run in self.runs], dtype=np.float64)

    def class_iou(self) -> np.ndarray:
        """Per-class IoU of every seed, ``(S, classes)`` (NaN: class absent in that run)."""
        return np.array([run.pooled["iou"] for run in self.runs], dtype=np.float64)


def spread(values: np.ndarray) -> dict:
    """``mean`` and sample ``std`` (NaN for one value), both exact in the printed decimals
    (:func:`~pointgeope.decimals.decimal_mean`, :func:`~pointgeope.decimals.decimal_std`), ``min``, ``max`` and
    ``n`` of ``values (S,)``."""
    n = int(values.size)
    return {"n": n, "mean": decimal_mean(values, skip_nan=False) if n else math.nan,
            "std": decimal_std(values),
            "min": float(values.min()) if n else math.nan, "max": float(values.max()) if n else math.nan}


# Scores closer than this are one score: the `all` rule's +1e-10 (pointgeope.metrics) moves a class's term by
# at most 1e-10, by another amount for another count, so 1/13 from one run and from another differ by ~1e-12.
SAME_SCORE = 1e-9


def _overlap(a: dict, b: dict) -> bool:
    """Whether the ranges ``[min, max]`` of two :func:`spread` overlap, ends within :data:`SAME_SCORE` touching."""
    return a["min"] <= b["max"] + SAME_SCORE and b["min"] <= a["max"] + SAME_SCORE


def _cell(s: dict, digits: int) -> str:
    """``"74.1 ± 0.5 (73.6–74.6)"``."""
    std = "" if math.isnan(s["std"]) else f" ± {pct(s['std'], digits)}"
    return f"{pct(s['mean'], digits)}{std} ({pct(s['min'], digits)}–{pct(s['max'], digits)})"


def ablation_markdown(variants: list[Variant], digits: int = 1) -> str:
    """Scores (mean ± std (min–max) over seeds), differences of the means to the first variant, each
    seed's scores, per-class IoU means, and notes on missing seeds or unlike folds."""
    head = [HEAD[k] for k in MEANS]
    lines = ["| variant | seeds | " + " | ".join(head) + " |", "|:--|:-:|" + "--:|" * len(MEANS)]
    for v in variants:
        cells = " | ".join(_cell(spread(v.values(k)), digits) for k in MEANS)
        lines.append(f"| {v.name} | {len(v.runs)} | {cells} |")
    base = variants[0]
    lines += ["", f"Difference of the means to {base.name}, percentage points (`~`: within the spread, the "
              "min–max ranges overlap):", "", "| variant | " + " | ".join(head) + " |", "|:--|" + "--:|" * len(MEANS)]
    for v in variants[1:]:
        cells = []
        for k in MEANS:
            a, b = spread(v.values(k)), spread(base.values(k))
            cells.append(pct(decimal_difference(a["mean"], b["mean"]), digits, signed=True)
                         + (" ~" if _overlap(a, b) else ""))
        lines.append(f"| {v.name} | " + " | ".join(cells) + " |")
    seeds = sorted({s for v in variants for s in v.seeds} | {s for v in variants for s, _ in v.missing})
    lines += ["", "Each seed (" + " / ".join(head) + "):", "", "| variant | " + " | ".join(
        f"seed {s}" for s in seeds) + " |", "|:--|" + "--:|" * len(seeds)]
    for v in variants:
        by_seed = dict(zip(v.seeds, v.runs, strict=True))
        lines.append(f"| {v.name} | " + " | ".join(
            " / ".join(pct(by_seed[s].pooled[k], digits) for k in MEANS) if s in by_seed else "missing"
            for s in seeds) + " |")
    names = next((run.class_names for v in variants for run in v.runs), CLASS_NAMES)  # write_trials: shared
    lines += ["", "Per-class IoU, mean over seeds:", "", "| variant | " + " | ".join(names) + " |",
              "|:--|" + "--:|" * len(names)]
    for v in variants:
        iou = [decimal_mean(column) for column in v.class_iou().T] if v.runs else [math.nan] * len(names)
        lines.append(f"| {v.name} | " + " | ".join(pct(x, digits) for x in iou) + " |")
    runs = [run for v in variants for run in v.runs]
    rules = class_mean_lines(runs, _mixed_rules(runs))
    lines += [""] + rules if len(rules) == 1 else []
    notes = [f"- {v.name}: seed {s} missing ({why})" for v in variants for s, why in v.missing]
    notes += [f"- {v.name}: seed {s} {note}" for v in variants for s, note in v.notes]
    notes += rules if len(rules) > 1 else []
    areas = {tuple(run.areas) for v in variants for run in v.runs}
    if len(areas) > 1:
        notes.append("- the runs cover different folds: their scores compare unlike test sets.")
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


def _mixed_rules(runs: list[RunSummary]) -> str:
    """The note on trials tested with different ``eval.class_mean`` rules: what ablate cannot rescore
    (``pointgeope report --class-mean`` rescores a report's runs, not an ablation's), and the commands that
    test the trials of the other rule with the more common one (``all``, the default, on a tie)."""
    count = {rule: sum(run.class_mean == rule for run in runs) for rule in ("all", "present")}
    target = max(count, key=lambda rule: count[rule])
    others = [run for run in runs if run.class_mean != target]
    commands = first_of((f"`pointgeope evaluate {fold_dir(run.path, run.folds[0].fold)} eval.class_mean={target}`"
                         for run in others), 3, "; ")
    return ("- the runs average their classes by different rules, so each variant's mean ± std of mAcc and mIoU, "
            f"and the differences, mix them: test the trials of the other rule with `{target}` ({commands}), "
            f"then rerun this ablation with `eval.class_mean={target}`.")


def ablation_json(variants: list[Variant]) -> dict:
    """Fractions (NaN -> null): per variant the seeds, each seed's pooled scores and the ``metrics.json`` files
    (path, sha256 of the bytes) they were read from, mean/std/min/max."""
    out = []
    for v in variants:
        out.append({"name": v.name, "seeds": list(v.seeds),
                    "missing": [{"seed": s, "reason": why} for s, why in v.missing],
                    "notes": [{"seed": s, "note": note} for s, note in v.notes],
                    "folds": sorted({a for run in v.runs for a in run.areas}),
                    "runs": [{"seed": seed, "path": str(run.path), **{k: run.pooled[k] for k in MEANS},
                              "metrics": [{"path": str(f.path), "sha256": f.sha256} for f in run.folds]}
                             for seed, run in zip(v.seeds, v.runs, strict=True)],
                    **{k: spread(v.values(k)) for k in MEANS}})
    return json_safe({"variants": out})


def ablation_csv(variants: list[Variant]) -> str:
    """One row per variant and score: ``variant, score, seeds, mean_pct, std_pct, min_pct, max_pct``."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["variant", "score", "seeds", "mean_pct", "std_pct", "min_pct", "max_pct"])
    for v in variants:
        for k in MEANS:
            s = spread(v.values(k))
            w.writerow([v.name, k, s["n"]] + [pct(s[x], 4, missing="") for x in ("mean", "std", "min", "max")])
    return buf.getvalue()


def write_ablation(variants: list[Variant], out: Path, header: str = "", digits: int = 1) -> list[Path]:
    """Write ``ablation.md`` (``header`` first), ``ablation.csv``, then ``ablation.json`` into ``out``, each
    atomically. The JSON, written last, is the record of the set: the ``header`` (the command and its
    settings), each run's ``metrics.json`` files with the sha256 of the bytes scored, and under ``"outputs"``
    the sha256 of the other two files, so that a reader tells a set cut by a kill between the writes (new
    tables beside the previous record) from a whole one. The temporary files a killed writer left in ``out``
    are removed first (the caller holds the lock of ``out`` or of a folder above it: ``ablate``, RUN's), but
    where ``out`` holds a lock file of its own (a ``report --out`` there): that writer's, who may be writing."""
    import hashlib
    import json

    from pointgeope.atomic import remove_leftovers, write_text_atomic

    out.mkdir(parents=True, exist_ok=True)
    remove_leftovers(out, recursive=False, locked=False)
    tables = {"ablation.md": header + ablation_markdown(variants, digits), "ablation.csv": ablation_csv(variants)}
    written = [write_text_atomic(out / name, text) for name, text in tables.items()]
    record = {"header": header, **ablation_json(variants),
              "outputs": {name: f"sha256:{hashlib.sha256(text.encode()).hexdigest()}" for name, text in tables.items()}}
    return written + [write_text_atomic(out / "ablation.json", json.dumps(record, indent=1) + "\n")]


def write_trials(trials: list[tuple[str, int, Path]], out: Path, header: str = "", digits: int = 1,
                 fold: int | None = None, left_out: dict | None = None, notes: dict | None = None) -> list[Path]:
    """Group the runs of ``(variant, seed, run folder)`` by variant (complete ones; the others as missing,
    with the reason) and write the report into ``out``; prints the markdown and the files written.

    ``fold``: score each run folder's ``area_<fold>`` alone (an ablation of that fold; ``None``: every fold
    it holds); ``left_out``: ``{(variant, seed): why}`` of runs not to score (a failed or stale trial),
    listed as missing with that reason; ``notes``: ``{(variant, seed): note}`` of runs scored with a note (a
    trial whose settings could not be checked)."""
    left_out, notes = left_out or {}, notes or {}
    variants: dict[str, Variant] = {}
    for name, seed, folder in trials:
        v = variants.setdefault(name, Variant(name, [], []))
        if (name, seed) in left_out:
            v.missing.append((seed, left_out[name, seed]))
            continue
        try:
            v.runs.append(load_run(folder, f"{name}/seed_{seed}", fold=fold))
            v.seeds.append(seed)
            if (name, seed) in notes:
                v.notes.append((seed, notes[name, seed]))
        except ReportError as err:
            v.missing.append((seed, str(err).split(";")[0]))
    chosen = list(variants.values())
    if not any(v.runs for v in chosen):
        why = "; ".join(f"{v.name} seed {s}: {reason}" for v in chosen for s, reason in v.missing[:1])
        none = "the 1 trial has no result" if len(trials) == 1 else f"none of the {len(trials):,} trials has a result"
        of_fold = f" of fold {fold}" if fold is not None else ""
        raise UserError(f"{out}: {none}{of_fold} to report ({why})")
    same_class_names([(run.folds[0].path, run.class_names) for v in chosen for run in v.runs])
    written = write_ablation(chosen, out, header, digits)
    print(ablation_markdown(chosen, digits))
    print("wrote:\n" + "\n".join(f"  {p}" for p in written))
    return written
