"""A command-line override ``section.key=value`` as the partial config mapping it sets.

The value is read as YAML (``optim.lr=1e-3`` -> ``0.001``, ``model.planes=[16,32]`` -> a list,
``data.voxel_max=null`` -> ``None``), except for a key whose type is text (``data.root``, ``train.run_dir``,
``train.device``): its value is the text after the first ``=``, as it is (but its surrounding spaces, and the
quotes of one quoted whole for YAML, ``train.run_dir='runs/x'``, as it was read before). A folder
name is not YAML: read as YAML, ``--run-dir "runs/exp #2"`` would lose ``" #2"`` to a comment and write to
``runs/exp``, and ``--run-dir 2024-01-01``, ``0001``, ``yes`` or ``~`` would be a date, a number, a boolean or
null::

    parse_override("optim.lr=1e-3", Config)                -> {"optim": {"lr": 0.001}}
    parse_override("train.run_dir=runs/exp #2", Config)    -> {"train": {"run_dir": "runs/exp #2"}}

The options that stand for a key (``--data-root``, ``--run-dir``) become such overrides
(``pointgeope.commands.config_overrides``), so they take any folder name too. The types are those of the
config's dataclasses, given as ``root`` (:mod:`pointgeope.engine.config` imports this module).
"""
from __future__ import annotations

import dataclasses
import typing

import yaml

from pointgeope.engine.config_yaml import DuplicateKeyError, LineError, load_yaml
from pointgeope.errors import UserError


def override_key(text: str) -> str:
    """``'optim.lr=0.1'`` -> ``'optim.lr'``."""
    return text.partition("=")[0].strip()


def key_type(root, parts: list[str]):
    """The declared type of the dotted key ``parts`` under dataclass ``root`` (``["train", "run_dir"]`` -> ``str``),
    or ``None`` when a part names no field (the unknown key is said where the mapping is checked)."""
    tp = root
    for part in parts:
        if not dataclasses.is_dataclass(tp):
            return None
        hints = typing.get_type_hints(tp)
        if part not in hints:
            return None
        tp = hints[part]
    return tp


def _text(value: str) -> str | None:
    """A text key's value: ``value`` but its surrounding spaces (``None`` when nothing is left), or, quoted
    whole as YAML quotes (``'runs/exp #1'``, ``"/data/s3dis"``), the text YAML reads inside the quotes, as every
    override's value was read before text keys were taken as they are."""
    text = value.strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        try:
            inside = yaml.safe_load(text)   # a quoted name may hold any character (no LineError)
        except yaml.YAMLError:   # 'a' and 'b': not one quoted scalar, so a name
            return text
        if isinstance(inside, str):
            return inside
    return text or None


def parse_override(text: str, root=None, error: type[Exception] = UserError) -> dict:
    """``'optim.lr=0.1'`` -> ``{'optim': {'lr': 0.1}}``: the value read as YAML, or, for a key that ``root``
    (the config's dataclass) declares as ``str``, the text after ``=`` as it is but its surrounding spaces and
    YAML quotes around the whole (:func:`_text`; an empty one: ``None``, refused by the type check). ``error``: the
    exception class raised for a malformed override."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip() or "." not in key:
        raise error(f"override {text!r}: expected section.key=value, e.g. optim.lr=0.1")
    parts = key.strip().split(".")
    if root is not None and key_type(root, parts) is str:
        parsed = _text(value)
    else:
        try:
            parsed = load_yaml(value) if value.strip() else None
        except (DuplicateKeyError, LineError) as err:
            raise error(f"override {text!r}: {err}") from None
        except yaml.YAMLError as err:
            raise error(f"override {text!r}: value is not valid YAML: {err}") from None
    tree: dict = {}
    node = tree
    for part in parts[:-1]:
        node = node.setdefault(part, {})
    node[parts[-1]] = parsed
    return tree
