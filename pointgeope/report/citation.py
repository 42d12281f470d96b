"""What a reader of a report needs to cite and reproduce each run's numbers: its code, config, data and machines.

``report.md`` ends its summary with one block per run (:func:`citation_lines`), ``report.json`` holds the same
under each run's ``"made_by"`` (:func:`citation_json`)::

    ### geope (6 folds)

    - code: pointgeope 0.2.0.dev0, commit 5e1c1896a8d8 (training and test)
    - config: sha256:3f2a...(16 hex) of the compared settings; model.backbone `ptv1`, model.pe `geope`, ...
    - data: points sha256:9c1e...(16 hex) of Area_1..Area_6
    - machines: trained on device cpu, precision float32, ...; tested on device cpu, ...

*code*: the version and commit of each fold's training and test (:func:`code_of`, :mod:`pointgeope.provenance`), the
folds grouped where they differ, ``not recorded`` for a fold of an older version. *config*: the sha256 of the
settings the folds share and the report compares (:mod:`pointgeope.report.settings`: all but where and how fast a
fold ran, its folder and seed, and the data's place and checksums), as canonical JSON, so that two runs of one
method and protocol show one hash; then the keys that say what a number is (:data:`SHOWN`); report.json lists every
shared key (``settings``). *data*: the sha256 of the areas' checksums (those of their points where every fold
records them, else of the files), one line ``<area> <checksum>`` per area in area order, then which areas, and
for a run of ``data.normal`` the normal estimate it read (``normals k=30, version 1``: no part of the points,
:mod:`pointgeope.data.normal_record`; nor of the config's hash).
*machines*: :func:`pointgeope.report.machine.machine_text`.
"""
from __future__ import annotations

import hashlib
import json

from pointgeope.engine.device_text import NOT_RECORDED
from pointgeope.plural import counted
from pointgeope.recorded_text import recorded_text, setting_text
from pointgeope.report.machine import machine_text
from pointgeope.report.settings import IGNORED, SEED, value_groups

# the keys that say what a number is, in the order said (those a fold lacks are left out)
SHOWN = ("model.backbone", "model.pe", "train.epochs", SEED, "eval.protocol", "eval.checkpoint", "eval.vote",
         "eval.max_fragments", "eval.tta.rotations", "eval.tta.scales", "eval.tta.flips")
_DATA = ("data.points.", "data.files.")
_NORMALS = "data.normals."  # the normal estimate a data.normal fold read of each area: said with the data


def _sha256(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _code_text(record: dict) -> str | None:
    """``pointgeope 0.2.0.dev0, commit 5e1c1896a8d8`` of a record's ``"pointgeope"`` and ``"pointgeope_commit"``
    (the commit left out where the code was no git checkout), ``... with uncommitted changes`` where its
    ``"pointgeope_modified"`` is true (the clone's code differed from the commit: :mod:`pointgeope.provenance`);
    ``None`` where it names no version. A version or commit no version writes (a newline, not hex digits: a record
    edited or damaged) is said in one bounded line, marked (:mod:`pointgeope.recorded_text`)."""
    version, commit = record.get("pointgeope"), record.get("pointgeope_commit")
    if not isinstance(version, str):
        return None
    if not (isinstance(commit, str) and commit):
        return f"pointgeope {recorded_text(version)}"
    changed = " with uncommitted changes" if record.get("pointgeope_modified") is True else ""
    hexadecimal = len(commit) <= 64 and all(c in "0123456789abcdef" for c in commit)
    commit = commit[:12] if hexadecimal else recorded_text(commit)
    return f"pointgeope {recorded_text(version)}, commit {commit}{changed}"


def code_of(metrics: dict) -> str:
    """The code of one fold, from its ``metrics.json``: the test's (the file's own version and commit) and the
    training's (those of its ``"trained_on"`` entries, in order), ``<code> (training and test)`` where they are
    one, else each said; :data:`NOT_RECORDED` where neither is (an older version). A training entry without code
    (a span trained by an older version: its checkpoint recorded the thread count alone) reads
    :data:`NOT_RECORDED` in its place (``not recorded, then pointgeope ...``), as does a training that records
    none beside a test that does: the training is never cited as the code of its later spans or of its test."""
    tested = _code_text(metrics)
    entries = metrics.get("trained_on") if isinstance(metrics.get("trained_on"), list) else []
    codes = [_code_text(e) or NOT_RECORDED for e in entries if isinstance(e, dict)] or [NOT_RECORDED]
    trained = ", then ".join(c for i, c in enumerate(codes) if i == 0 or c != codes[i - 1])
    if trained == tested:
        return f"{tested} (training and test)"
    if trained == NOT_RECORDED and tested is None:
        return NOT_RECORDED
    return "; ".join([f"{trained} (training)"] + [f"{tested} (test)"] * bool(tested))


def config_hash(settings: dict) -> str | None:
    """The sha256 of the compared ``settings`` (``section.key -> value`` a run's folds share) as canonical JSON:
    every key but :data:`~pointgeope.report.settings.IGNORED`, the seed, ``data.root``, the data's checksums and
    normal estimates; ``None`` where none is left (no fold records its settings)."""
    compared = {k: v for k, v in settings.items()
                if k not in IGNORED and k not in (SEED, "data.root") and not k.startswith((*_DATA, _NORMALS))}
    return _sha256(json.dumps(compared, sort_keys=True)) if compared else None


def data_hash(settings: dict) -> tuple[str, str, list[str]] | None:
    """``(kind, sha256, areas)``: the sha256 of the areas' checksums the folds share (``points`` where recorded,
    else ``files``), as ``<area> <checksum>`` lines; ``None`` where they record none."""
    for prefix, kind in zip(_DATA, ("points", "files"), strict=True):
        found = {k[len(prefix):]: v for k, v in settings.items() if k.startswith(prefix)}
        if found:
            areas = sorted(found, key=lambda a: (len(a), a))
            return kind, _sha256("".join(f"{a} {found[a]}\n" for a in areas)), areas
    return None


def citation_json(run) -> dict:
    """``report.json``'s ``made_by`` of ``run`` (a :class:`~pointgeope.report.runs.RunSummary`): ``code``
    (``{area: text}``), ``config_sha256``, ``data`` (``{kind, sha256, areas}`` or ``None``), ``settings`` (every
    key its folds share) and ``machines`` (``{area: {aspect: text}}``)."""
    settings = run.settings
    data = data_hash(settings)
    normals = {k.removeprefix(_NORMALS): v for k, v in settings.items() if k.startswith(_NORMALS)}
    return {"code": {f.area: f.code for f in run.folds}, "config_sha256": config_hash(settings),
            "data": None if data is None else {**dict(zip(("kind", "sha256", "areas"), data, strict=True)),
                                               **({"normals": normals} if normals else {})},
            "settings": json.loads(json.dumps(settings, default=str)), "machines": run.machines}


def citation_lines(run) -> list[str]:
    """``report.md``'s block on what made ``run``'s numbers (module docstring)."""
    settings, mixed = run.settings, run.mixed
    codes = {f.area: f.code for f in run.folds}
    code = "; ".join(f"{areas}: {value}" for areas, value in value_groups(codes)) if len(set(codes.values())) > 1 \
        else run.folds[0].code
    lines = [f"### {run.name} ({counted(len(run.folds), 'fold')})", "", f"- code: {code}"]
    if (digest := config_hash(settings)) is None:
        lines.append(f"- config: {NOT_RECORDED}")
    else:
        shown = ", ".join(f"{key} `{setting_text(settings[key])}`" for key in SHOWN if key in settings)
        left = " without the keys its folds differ in (notes)" if mixed else ""
        lines.append(f"- config: {digest[:23]} of the compared settings{left} (report.json: `settings`); {shown}")
    data = data_hash(settings)
    if any(key.startswith(_DATA) for key in mixed):
        lines.append("- data: differs between its folds (notes)")
    else:
        normals = {k.removeprefix(_NORMALS): v for k, v in settings.items() if k.startswith(_NORMALS)}
        said = "; ".join(f"{value} ({areas})" if len(set(normals.values())) > 1 else str(value)
                         for areas, value in value_groups(normals))
        lines.append(f"- data: {NOT_RECORDED}" if data is None else
                     f"- data: {data[0]} {data[1][:23]} of {value_groups(dict.fromkeys(data[2], 0))[0][0]}"
                     + (f"; normals {said}" if normals else ""))
    lines.append(f"- machines: {machine_text(run.machines) or NOT_RECORDED}")
    return lines
