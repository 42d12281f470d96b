"""Whether the folds of one run were trained and evaluated alike: their settings compared key by key.

A fold's settings are its config as ``section.key`` -> value: the one its evaluation recorded in ``metrics.json``
(``"config"``), else the fold's ``config.yaml`` (what it was trained with) with the eval keys that ``metrics.json``
records (``checkpoint``, ``vote``, ``max_fragments``, ``tta_views``) in place of the file's. A ``metrics.json``
that records no ``vote`` was written before the key (``vote`` and ``max_fragments`` came into the file with
``eval.vote``), by a test that summed softmax: its ``eval.vote`` is ``softmax``
(:data:`~pointgeope.engine.record_keys.BEFORE_KEY`'s rule for a record of before), and over the fragments of the
first versions (every point in one fragment of at most one point per voxel), not the published test's complete grid
samples, which came in the same commit: its ``eval.protocol`` is :data:`FIRST_TEST`. So such a fold is pooled
neither with one voted by logits nor with one of today's test unsaid (:func:`again_advice` names the folds to
evaluate again: today's ``evaluate`` tests a first-version fold by the published fragments). A pooled 6-fold number
means one method on one data set under one protocol, so every key is compared but those of :data:`IGNORED` (where
and how fast a run went, its seed, its folder, the class-mean rule that the report rescores by itself). A key that
an older version did not write reads as it was then where that is known (``engine.record_keys``: an old
``point3drope`` fold turned at scale 1.0); another key missing from some folds and a fold with no recorded settings
are not compared. What differs is
``{key: {area: value}}``::

    {"model.pe": {"Area_1": "geope", "Area_2": "rpe", ...}, "data.files.Area_3": {...}}

The data set is compared by its files: ``metrics.json`` records the checksums of the area files the fold
trained and was tested on (``"data"``), as ``data.files.<area>``; where every fold records them,
``data.root`` (where the files were: a node's local copy, a path spelled from another folder) is not
compared. Folds that do not record them (an older version) compare ``data.root``. Where every fold also
records the checksums of the files' points (``"data_points"``, ``pointgeope.checksum.points_checksum``), as
``data.points.<area>``, those are compared instead of the files': the same raw data prepared on two nodes,
or from the zip on one and the folder on another, differs only in where it was prepared from. A fold of
``data.normal`` also has the normal estimate it read of each area (``"data_normals"``,
:mod:`pointgeope.data.normal_record`) as ``data.normals.<area>`` (``k=30, version 1``): folds of one run that
read different estimates are pooled with a note (the same points, other normals: ``report.runs``), runs side
by side name it among the keys they differ in.
"""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from pointgeope.engine.config_yaml import flatten  # (no torch: the report imports none)
from pointgeope.engine.record_keys import BEFORE_KEY, as_recorded
from pointgeope.plural import first_of
from pointgeope.recorded_text import setting_repr

IGNORED = frozenset({
    "data.num_workers", "data.cache", "data.hierarchy",                 # how fast the data came
    "train.device", "train.threads", "train.amp", "train.progress",     # where and how fast it trained
    "train.cuda_graphs", "train.run_dir", "train.seed", "train.val_every", "train.checkpoint_every",
    "train.epochs_per_run",
    "eval.batch_points", "eval.class_mean",                              # memory; rescored by the report
})
SEED = "train.seed"
_SECTIONS = ("model", "data", "optim", "train", "eval")  # the order a message names the keys in
FIRST_TEST = "ptv1, fragments of the first versions"  # eval.protocol of a metrics.json without vote (module doc)
_METRICS_EVAL = {"checkpoint": "eval.checkpoint", "vote": "eval.vote", "max_fragments": "eval.max_fragments",
                 "tta_views": "eval.tta_views"}


def fold_settings(metrics: dict, folder: Path) -> dict[str, object] | None:
    """The settings of one fold (module docstring), or ``None`` where neither file records them."""
    files = {f"data.{kind}.{area}": checksum for key, kind in (("data", "files"), ("data_points", "points"))
             if isinstance(metrics.get(key), dict) for area, checksum in metrics[key].items()}
    if isinstance(metrics.get("config"), dict):
        settings = flatten(as_recorded(metrics["config"]))
        return {**settings, **files, **_normals(metrics, settings)}
    try:
        config = yaml.safe_load((Path(folder) / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    if not isinstance(config, dict):
        return None
    settings = {k: v for k, v in flatten(as_recorded(config)).items() if not k.startswith("eval.")}
    for name, key in _METRICS_EVAL.items():
        if name in metrics:
            value = metrics[name]
            settings[key] = Path(value).stem if name == "checkpoint" and isinstance(value, str) else value
    if "eval.vote" not in settings:   # an evaluate of before the key: the rule of its time
        recorded = {name: metrics[name] for name in _METRICS_EVAL if name in metrics}
        if (rule := BEFORE_KEY["eval.vote"]({"eval": recorded})) is not None:
            settings["eval.vote"], settings["eval.protocol"] = rule, FIRST_TEST
    return {**settings, **files, **_normals(metrics, settings)}


def _normals(metrics: dict, settings: dict) -> dict[str, str]:
    """``data.normals.<area>`` -> the normal estimate a fold of ``data.normal`` read of each area
    (:func:`pointgeope.data.normal_record.recorded`, in words; those it read in turn where a resume read another:
    :func:`~pointgeope.data.normal_record.read_text`); none for a fold that read no normals."""
    from pointgeope.data import normal_record as normals

    read = normals.recorded({"config": {"data": {"normal": settings.get("data.normal")}},
                             **{key: metrics.get(key) for key in ("data", "data_normals")}})
    earlier = normals.earlier_of(metrics)
    return {f"data.normals.{area}": normals.read_text(area, estimate, earlier)
            for area, estimate in (read or {}).items()}


def normals_read_in_turn(settings: dict | None) -> list[str]:
    """``Area_2's k=30, version 1 until epoch 3 (step 120), then k=30, version 2`` for each area whose normals a
    fold of ``settings`` (:func:`fold_settings`) read of several estimates in turn (resumed on files of another);
    ``[]`` where it read one of each area."""
    from pointgeope.data.normal_record import THEN

    return [f"{key.removeprefix('data.normals.')}'s {value}" for key, value in sorted((settings or {}).items())
            if key.startswith("data.normals.") and isinstance(value, str) and THEN in value]


def _order(key: str) -> tuple[int, str]:
    """Model keys first, then data, optim, train, eval (:data:`_SECTIONS`), each alphabetically."""
    section = key.split(".")[0]
    return (_SECTIONS.index(section) if section in _SECTIONS else len(_SECTIONS), key)


def mixed_settings(folds: dict[str, dict | None], ignored: frozenset = IGNORED) -> dict[str, dict[str, object]]:
    """``{key: {area: value}}`` of the compared keys (all but ``ignored``) whose value differs between the folds
    of ``folds`` (``{area: settings}``)."""
    known = {area: s for area, s in folds.items() if s is not None}
    if len(known) < 2:
        return {}
    keys = set.intersection(*(set(s) for s in known.values())) - ignored
    if all(any(key.startswith("data.files.") for key in s) for s in known.values()):
        keys.discard("data.root")   # the files' checksums say whether the data is the same
    if all(any(key.startswith("data.points.") for key in s) for s in known.values()):
        keys = {k for k in keys if not k.startswith("data.files.")}  # their points alone say it
    mixed = {}
    for key in sorted(keys, key=_order):
        values = {area: s[key] for area, s in known.items()}
        if len({json.dumps(v, sort_keys=True) for v in values.values()}) > 1:
            mixed[key] = values
    return mixed


def run_settings(folds: dict[str, dict | None]) -> dict[str, object]:
    """The settings of a run, ``{area: settings}`` of its folds: the ``section.key -> value`` that every fold
    recording settings shares (a key whose value differs between its folds, pooled with ``--allow-mixed``,
    and a key some fold lacks are left out); ``{}`` where no fold records its settings."""
    known = [s for s in folds.values() if s is not None]
    if not known:
        return {}
    keys = set.intersection(*(set(s) for s in known))
    return {key: known[0][key] for key in keys
            if len({json.dumps(s[key], sort_keys=True) for s in known}) == 1}


def run_differences(runs: dict[str, dict]) -> dict[str, dict[str, object]]:
    """``{key: {run name: value}}`` of the compared keys (as :func:`mixed_settings` compares folds, and
    ``train.seed``: runs of one method with other seeds differ by chance alone) whose value differs between runs
    side by side, ``runs`` ``{name: run_settings}``; a run recording no settings is not compared."""
    return mixed_settings({name: settings or None for name, settings in runs.items()}, IGNORED - {SEED})


def _areas_text(areas: list[str]) -> str:
    """``Area_1, Area_3..Area_6``: consecutive areas as a range."""
    numbers = sorted(int(a.rsplit("_", 1)[1]) for a in areas)
    groups: list[list[int]] = []
    for n in numbers:
        if groups and n == groups[-1][-1] + 1:
            groups[-1].append(n)
        else:
            groups.append([n])
    return ", ".join(", ".join(f"Area_{n}" for n in g) if len(g) < 3 else f"Area_{g[0]}..Area_{g[-1]}"
                     for g in groups)


def value_groups(values: dict[str, object]) -> list[tuple[str, object]]:
    """``[(areas text, value)]`` of one key, the areas that share a value together, in area order."""
    groups: dict[str, list[str]] = {}
    for area, value in values.items():
        groups.setdefault(json.dumps(value, sort_keys=True), []).append(area)
    return [(_areas_text(areas), values[areas[0]]) for areas in groups.values()]


def again_advice(mixed: dict[str, dict[str, object]], settings: dict[str, dict | None],
                 folders: dict[str, Path]) -> str:
    """``; or evaluate Area_1 again by ...: pointgeope evaluate RUN/area_1 eval.vote=logits``, the folds of
    ``mixed`` (:func:`mixed_settings` of the folds' ``settings``, ``{area: fold_settings}``) whose test today's
    ``evaluate`` makes like the others' (their networks are kept); ``folders`` ``{area: fold folder}``. Where
    some folds' ``eval.protocol`` is :data:`FIRST_TEST`, those (whatever their number: only evaluated again do they
    take the published fragments), with the ``eval.vote`` and ``eval.max_fragments`` the others share (a
    first-version fold's config has neither: it would read as ``softmax`` over every fragment); else, where the
    folds differ in ``eval.vote``, those of the rule fewer folds used (of a tie, those not of ``logits``, the
    default). ``""`` where neither differs, or where a key that no evaluation sets differs too (``model.*``,
    ``data.*``: evaluating again would not make the folds one number)."""
    if any(not key.startswith("eval.") for key in mixed):
        return ""
    protocols, votes = mixed.get("eval.protocol", {}), mixed.get("eval.vote", {})
    if first := [area for area, v in protocols.items() if v == FIRST_TEST]:
        others = [s for area, s in settings.items() if area not in first and s is not None]
        shared = [(key, {json.dumps(s.get(key)) for s in others}) for key in ("eval.vote", "eval.max_fragments")
                  if all(key in s for s in others)]
        override = "".join(f" {key}={json.loads(value.pop()) if key == 'eval.vote' else value.pop()}"
                           for key, value in shared if len(value) == 1)
        command = " ; ".join(f"pointgeope evaluate {folders[area]}{override}" for area in first)
        return f"; or evaluate {', '.join(first)} again by today's test (the published fragments): {command}"
    counts = {json.dumps(v): list(votes.values()).count(v) for v in votes.values()}
    if len(counts) != 2 or not all(isinstance(v, str) for v in votes.values()):
        return ""
    keep = max(votes.values(), key=lambda v: (counts[json.dumps(v)], v == "logits"))
    again = [area for area, v in votes.items() if v != keep]
    command = " ; ".join(f"pointgeope evaluate {folders[area]} eval.vote={keep}" for area in again)
    return f"; or evaluate {', '.join(again)} again by the vote of the others: {command}"


def mixed_text(mixed: dict[str, dict[str, object]], limit: int = 6) -> str:
    """``model.pe (Area_1, Area_3..Area_6: 'geope'; Area_2: 'rpe'), data.root (...)``: at most ``limit``
    keys, then how many more; each value as ``repr`` writes it, a damaged one bounded and marked
    (:func:`pointgeope.recorded_text.setting_repr`)."""
    return first_of((f"{key} (" + "; ".join(f"{areas}: {setting_repr(value)}" for areas, value in value_groups(values))
                     + ")" for key, values in mixed.items()), limit, noun="key")

