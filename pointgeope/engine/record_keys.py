"""What a saved config means by a key it lacks: the value the key had before it existed.

A run records its resolved config: its fold folder's ``config.yaml``, its checkpoints' ``"config"`` and its
``metrics.json``'s ``"config"``. A record written before a key existed lacks the key, and it must still read
as what its run did. For most keys that is the key's default (the key added an option and kept what ran).
For the keys of :data:`BEFORE_KEY` the default changed what runs, so the table gives the value the record
meant, worked out from the record itself:

- ``model.point3drope_scale``: ``1.0`` for a ``point3drope`` run, which turned at 1 per metre (the key's
  default, 0.5, is Utonia's S3DIS angles); with any other ``model.pe`` the key means nothing, so the default;
- ``eval.amp``: PTv1's test ran at the run's ``train.amp`` (bf16 or fp16 autocast on CUDA); PTv3's ran in
  float32 (``none``) whatever ``train.amp`` said.
- ``eval.class_mean``: ``present``, the rule of every test before the key (a class without ground truth or
  prediction left out of mAcc and mIoU), not its default ``all``: an old run evaluated again is scored as its
  own version scored it, as the report reads its ``metrics.json``;
- ``eval.vote``: ``softmax``, what every test summed before the key (its default ``logits`` is the PTv1
  authors' sum), in a record without ``eval.max_fragments`` too (both came with the published test protocol:
  a record holding one is no record of before);
- ``optim.no_weight_decay``: ``[]`` for a run with learnt frequencies (``rope-mixed``, or
  ``model.geope_learnable`` beside an encoding with positions: PTv1's only backbone then), whose optimiser
  decayed every parameter in its one group; a resume with today's default would load that one group's state
  into two. Any other run has no such parameter: the default, which changes nothing for it;
- ``model.rope_mixed_init``: ``axial`` for a ``rope-mixed`` run, which started from ``rope3d``'s frequencies
  (the default, ``random``, is its authors' draw);
- ``data.normal``: ``false``, the features ``[rgb | xyz]`` that every run fed before the key (its default too, but
  written out: the report compares a fold recorded before the key with one of today's recipe, ``true``, where a
  key missing from some folds would not be compared, and a run's folds would pool two feature layouts unsaid).

A key that the record's run never read and a config refuses today is read at its default (:data:`UNREAD`):
``model.rope_mixed_init`` beside an encoding that turns at other frequencies (``geope``: it changed nothing);
its run's record still loads and resumes. Beside ``rope-mixed`` (its reader) or an encoding without positions
(``none``, ``rpe``: an ablation's baseline, which a config lets take it) it is read as written, so such a
run resumes with the config that trained it.

A key whose values changed form keeps its older values readable through :data:`OLDER_VALUES`: ``data.augment``
was a yes/no before its augmentations were named; ``false`` (none) is ``none``, and ``true`` (PTv1's augmentations
as they were then: colour jitter 0.05 and no hue or saturation shift) is what no value of today's makes, so a config
holding it is refused in one line (:func:`older_value`) and a run recorded with it is neither evaluated nor
resumed (a report still reads its results).

Every reader of a saved config reads it through :func:`as_recorded`: a resume's comparison with the config
that resumes it (``config_diff.config_differences``), the config that ``evaluate`` and ``predict`` rebuild the
network with (``config.load_record``, ``config.config_from_dict``), a skipped fold's test note
(``checkpoint.eval_values``) and the report's comparison of folds (``report.settings``). So an old
``point3drope`` run is evaluated at the angles it was trained at, and a resume of it with today's config is
refused with the key named (``model.point3drope_scale: checkpoint 1.0, now 0.5``) and, as for every key of
:data:`BEFORE_KEY` the record lacks, the override that runs it as it ran (:func:`predating_note`: an old PTv3
run resumed with today's recipe, ``data.normal=false``).

No torch here: the report imports it.
"""
from __future__ import annotations

from collections.abc import Callable

from pointgeope.engine.config_values import FREQUENCY_FREE, ONE_READER_KEYS


def _section(record: dict, name: str) -> dict:
    value = record.get(name)
    return value if isinstance(value, dict) else {}


def _point3drope_scale(record: dict):
    return 1.0 if _section(record, "model").get("pe") == "point3drope" else None


def _eval_amp(record: dict):
    if _section(record, "model").get("backbone", "ptv1") == "ptv3":
        return "none"
    return _section(record, "train").get("amp", "none")


def _no_weight_decay(record: dict):
    model = _section(record, "model")
    learnt = model.get("pe") == "rope-mixed" or (model.get("geope_learnable") is True
                                                 and model.get("pe", "rpe") not in FREQUENCY_FREE)
    return [] if learnt and model.get("backbone", "ptv1") == "ptv1" else None


# "section.key" -> the value that key had in a record written before it existed (None: the key's default)
BEFORE_KEY: dict[str, Callable[[dict], object]] = {
    "model.point3drope_scale": _point3drope_scale,
    "model.rope_mixed_init": lambda record: "axial" if _section(record, "model").get("pe") == "rope-mixed" else None,
    "optim.no_weight_decay": _no_weight_decay,
    "eval.amp": _eval_amp,
    "eval.class_mean": lambda record: "present",
    "eval.vote": lambda record: None if "max_fragments" in _section(record, "eval") else "softmax",
    "data.normal": lambda record: False,
}


# "section.key" -> whether a config refuses the key beside the record's encoding, which never read it (the
# encodings without positions take it: config_values.unread_keys)
UNREAD: dict[str, Callable[[dict], bool]] = {
    "model.rope_mixed_init": lambda record: _section(record, "model").get("pe") not in
    (ONE_READER_KEYS["rope_mixed_init"], *FREQUENCY_FREE),
}


# "section.key" -> {a value older versions wrote: today's value of the same meaning, or why none has it}
OLDER_VALUES: dict[str, dict[bool, tuple[bool, str]]] = {
    "data.augment": {
        False: (True, "none"),
        True: (False, "PTv1's augmentations as made then: colour jitter 0.05, no hue or saturation shift"),
    },
}


def _older_form(key: str, value: object) -> tuple[bool, str] | None:
    """``OLDER_VALUES[key][value]`` (whether today has a value of that meaning, and it or what none has) where
    ``value`` is an older version's form of ``key``'s value; ``None`` otherwise (1 is not True here)."""
    return OLDER_VALUES.get(key, {}).get(value) if type(value) is bool else None


def older_value(key: str, value: object, choices: str) -> object:
    """``value`` of the dotted ``key`` as today's config reads it: today's value of the same meaning where
    ``value`` is an older version's form of one (:data:`OLDER_VALUES`), else ``value`` itself; raises ValueError
    with the line's text (``choices``: today's values, as the message lists them) where no value of today's
    means what it meant."""
    if (older := _older_form(key, value)) is None:
        return value
    same, today = older
    if same:
        return today
    raise ValueError(f"{key}: {str(value).lower()} is an older version's setting ({today}), which none of today's "
                     f"{choices} makes: this version cannot evaluate, predict with or resume a run trained with it; "
                     "train it again (train --force) or use the version that trained it (in a config file, write one "
                     "of today's values)")


def as_recorded(record: dict) -> dict:
    """``record`` (a saved config as a plain mapping of sections) with every key of :data:`BEFORE_KEY` that its
    sections lack set to the value the key had before it existed, and every key of :data:`UNREAD` its run never
    read left out (its default); a new mapping (``record`` is not changed).
    A section that the record lacks, or that is not a mapping, is left as it is (every saved config has
    every section; the config's checks name a broken one)."""
    if not isinstance(record, dict):
        return record
    out = dict(record)
    for key, before in BEFORE_KEY.items():
        section, name = key.split(".")
        if not isinstance(out.get(section), dict) or name in out[section]:
            continue
        value = before(record)
        if value is not None:
            out[section] = {**out[section], name: value}
    for key in OLDER_VALUES:                               # an older form of a value that today has
        section, name = key.split(".")
        older = _older_form(key, _section(out, section).get(name))
        if older is not None and older[0]:
            out[section] = {**out[section], name: older[1]}
    for key, unread in UNREAD.items():
        section, name = key.split(".")
        if isinstance(out.get(section), dict) and name in out[section] and unread(record):
            out[section] = {k: v for k, v in out[section].items() if k != name}
    return out


def predating_note(saved: dict, differences: list[tuple[str, object, object]]) -> str:
    """For a refusal naming ``differences`` (``config_diff.config_differences``'s ``(key, saved, now)``): the
    override that runs the saved record as it ran where a differing key of :data:`BEFORE_KEY` is one the record
    lacks (it predates the key, and today's config file sets it otherwise: ``data.normal`` of the PTv3 recipe),
    ``"; it was recorded before data.normal existed: the override data.normal=false uses it as it ran"``, and
    what a saved value of an older form that no value of today's makes was (:data:`OLDER_VALUES`: no config of
    today's resumes it); else ``""``."""
    older = [f"; {key}: {str(value).lower()} is an older version's setting ({form[1]}), which no value of today's "
             "makes" for key, value, _ in differences
             if (form := _older_form(key, value)) is not None and not form[0]]
    lacking = [(key, value) for key, value, _ in differences if key in BEFORE_KEY and isinstance(saved, dict)
               and key.split(".")[1] not in _section(saved, key.split(".")[0])]
    if not lacking:
        return "".join(older)
    keys = " and ".join(key for key, _ in lacking)
    sets = " ".join(f"{key}={str(value).lower() if isinstance(value, bool) else value}" for key, value in lacking)
    return f"; it was recorded before {keys} existed: the override {sets} uses it as it ran" + "".join(older)
