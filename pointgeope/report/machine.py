"""The machines a run's folds were trained and tested on, as their ``metrics.json`` records them, compared.

Evaluate records ``"trained_on"`` (the machines of the fold's training, in order: a fold resumed elsewhere
lists both) and ``"tested_on"`` (:mod:`pointgeope.engine.machine_record`)::

    "trained_on": [{"device": "cuda", "device_name": "NVIDIA H200", "processes": 1, "threads": 16,
                    "precision": "bf16", "torch": "2.13.0+cu126"}],
    "tested_on": {"device": "cpu", "processes": 1, "threads": 2, "precision": "float32", "torch": "2.13.0"}

A fold's machine reads as ``{aspect: text}``, e.g. ``{"train device": "cuda (NVIDIA H200)", "train precision":
"bf16", "test CPU threads": "2", ...}``; a training that changed machine reads ``"cpu, then cuda (...)"``; the
CPU threads of a CUDA device do not apply (its math runs on the device: ``None``, not compared). An entry
without an aspect (a checkpoint of an older version recorded the thread count alone) reads ``not recorded``.

The machine is not a setting of the method: folds of one method that differ in it are pooled (a score moves
with it by the float noise of another device, precision, thread count, DDP process count or torch version,
not by another method), with a note naming the folds and the aspects (:func:`machine_note`); folds alike say
nothing. A fold whose ``metrics.json`` records no machine (an older version) reads ``not recorded`` in each
aspect that another fold records: nothing says it ran alike. A value no version writes (a newline, a list where a
number was: a record edited or damaged) is said in one bounded line, marked ``(looks damaged)``
(:mod:`pointgeope.recorded_text`), so that it cannot split the report's list of notes. No torch here: the report
imports none.
"""
from __future__ import annotations

import json

from pointgeope.engine.device_text import NOT_RECORDED, device_text
from pointgeope.recorded_text import recorded_text
from pointgeope.report.settings import value_groups

ASPECTS = (("device", "device"), ("precision", "precision"), ("processes", "DDP processes"),
           ("threads", "CPU threads"), ("torch", "torch"))   # (record key, its words), in the order said


def _entry_text(entry: dict, key: str) -> str | None:
    """One machine record's ``key`` in words; ``None`` where it does not apply (a CUDA device's CPU threads)."""
    if key == "threads" and entry.get("device") == "cuda":
        return None
    if key == "device":
        return device_text(entry) or NOT_RECORDED
    value = entry.get(key)
    return NOT_RECORDED if value is None else recorded_text(value, int if key in ("processes", "threads") else str)


def _aspects(entries: list, stage: str) -> dict[str, str | None]:
    """``{"<stage> <aspect>": text}`` of the machine records ``entries`` (in order), each aspect's distinct
    consecutive values joined by ``, then``; ``None`` for an aspect that applies to none of them."""
    out: dict[str, str | None] = {}
    entries = [e for e in entries if isinstance(e, dict)]
    for key, words in ASPECTS:
        texts = [t for t in (_entry_text(e, key) for e in entries) if t is not None]
        texts = [t for i, t in enumerate(texts) if i == 0 or t != texts[i - 1]]
        if texts and texts != [NOT_RECORDED]:
            out[f"{stage} {words}"] = ", then ".join(texts)
        elif entries and not texts:   # applies to none of them (a CUDA training's CPU threads)
            out[f"{stage} {words}"] = None
    return out


def fold_machine(metrics: dict) -> dict[str, str | None]:
    """``{aspect: text}`` of the machines a fold's ``metrics`` (its ``metrics.json``) records (module
    docstring); ``{}`` where it records none."""
    trained, tested = metrics.get("trained_on"), metrics.get("tested_on")
    return {**_aspects(trained if isinstance(trained, list) else [], "train"),
            **_aspects([tested] if isinstance(tested, dict) else [], "test")}


def machine_differences(folds: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """``{aspect: {area: text}}`` of the aspects in which the folds ``{area: fold_machine}`` differ; a fold
    without an aspect another one records reads :data:`NOT_RECORDED` there; one where it does not apply
    (``None``) is not compared in it."""
    aspects = [a for stage in ("train", "test") for _, words in ASPECTS for a in [f"{stage} {words}"]
               if any(a in m for m in folds.values())]
    out = {}
    for aspect in aspects:
        values = {area: m.get(aspect, NOT_RECORDED) for area, m in folds.items() if m.get(aspect, "") is not None}
        if len(set(values.values())) > 1:
            out[aspect] = values
    return out


def _recorded(text: str) -> str:
    """An aspect's text without its ``not recorded`` parts (``not recorded, then cpu`` -> ``cpu``; ``""`` where
    none is recorded): what can be compared with another fold's."""
    parts = [t for t in text.split(", then ") if t != NOT_RECORDED]
    return ", then ".join(t for i, t in enumerate(parts) if i == 0 or t != parts[i - 1])


def recorded_differences(folds: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
    """The aspects of :func:`machine_differences` in which the folds' records differ (two of them record other
    values): a fold that ran on another machine; the others differ only where a fold records nothing (an older
    version), which says nothing of its machine."""
    return {aspect: values for aspect, values in machine_differences(folds).items()
            if len({_recorded(v) for v in values.values()} - {""}) > 1}


def _groups_text(values: dict[str, str]) -> str:
    """``bf16 (Area_1..Area_3), float32 (Area_4..Area_6)``: one aspect's ``{area: text}``, the areas grouped."""
    return ", ".join(f"{value} ({areas})" for areas, value in value_groups(values))


def machine_text(folds: dict[str, dict[str, str]]) -> str:
    """What the folds ran on, in words: each aspect once where the folds share it, else per fold groups::

        trained on device cuda (NVIDIA H200), precision bf16 (Area_1..Area_3), float32 (Area_4..Area_6), ...;
        tested on device cpu, ...

    ``""`` where no fold records its machine."""
    differ = machine_differences(folds)
    stages = []
    for stage, said in (("train", "trained on"), ("test", "tested on")):
        parts = []
        for words in (words for _, words in ASPECTS):
            aspect = f"{stage} {words}"
            if aspect in differ:
                parts.append(f"{words} {_groups_text(differ[aspect])}")
            elif texts := {m[aspect] for m in folds.values() if m.get(aspect) is not None}:
                parts.append(f"{words} {texts.pop()}")
        if parts:
            stages.append(f"{said} " + ", ".join(parts))
    return "; ".join(stages)


def machine_note(name: str, folds: dict[str, dict[str, str]]) -> str:
    """The report's one-line note on a run whose folds ran on different machines (pooled: module docstring),
    naming the aspects and the folds; where they differ only in what a fold does not record (an older version),
    a note that says so; ``""`` where they ran alike (or none records its machine)."""
    differ = machine_differences(folds)
    if not differ:
        return ""
    said = "; ".join(f"{aspect} {_groups_text(values)}" for aspect, values in differ.items())
    if not recorded_differences(folds):
        return (f"- {name}: its folds' machines are not all recorded ({said}): where recorded they agree; nothing "
                "says that the parts not recorded ran alike. Pooled as one method.")
    return (f"- {name}: its folds ran on different machines ({said}): pooled as one method, with the float "
            "differences of the machines in its scores.")


def runs_machine_note(runs: dict[str, dict[str, dict[str, str]]]) -> str:
    """The note on runs side by side (``{run name: {area: fold_machine}}``) that ran on different machines: each
    aspect a run's folds share compared between the runs (an aspect its folds differ in reads ``differs between
    its folds``; a fold that does not record it, and a run that records none, are not compared: only records
    that differ are said); ``""`` where they ran alike."""
    shared: dict[str, dict[str, str | None]] = {}
    for name, folds in runs.items():
        for aspect in {a for m in folds.values() for a in m}:
            values = {_recorded(m.get(aspect, NOT_RECORDED)) for m in folds.values()
                      if m.get(aspect, "") is not None} - {""}
            shared.setdefault(name, {})[aspect] = (None if not values else values.pop() if len(values) == 1
                                                   else "differs between its folds")   # None: none records it
    if len(shared) < 2:
        return ""
    said = []
    for aspect in [f"{stage} {words}" for stage in ("train", "test") for _, words in ASPECTS]:
        values = {name: m[aspect] for name, m in shared.items() if m.get(aspect) is not None}
        if len(set(values.values())) > 1:
            said.append(f"{aspect} " + ", ".join(f"{value} ({name})" for name, value in values.items()))
    return (f"- the runs ran on different machines ({'; '.join(said)}): their differences hold the float "
            "differences of the machines too.") if said else ""


def machine_json(folds: dict[str, dict[str, str]]) -> dict:
    """``report.json``'s ``machines`` of a run: ``{"folds": {area: {aspect: text}}, "differ": [aspect, ...],
    "not_recorded": [aspect, ...]}``: the aspects whose records differ between folds, and those some fold does not
    record (or records in part) where another does."""
    differ = recorded_differences(folds)
    unknown = [aspect for aspect, values in machine_differences(folds).items()
               if any(NOT_RECORDED in value for value in values.values())]
    return json.loads(json.dumps({"folds": folds, "differ": list(differ), "not_recorded": unknown}))
