"""Reading a config file's YAML: PyYAML's safe loader, except that a key given twice in one mapping is an
error instead of the last one winning silently::

    model:
      pe: geope      # line 2
      pe: rpe        # line 3 -> DuplicateKeyError: key 'model.pe' is given twice, on lines 2 and 3

YAML merge keys (``<<: *base``) still let a mapping override what it merges.

:func:`flatten` names every value of such a plain config by its dotted key (``model.pe``), and
:func:`value_text` writes a value, as overrides and messages name them: a fold's settings in the report,
a test's ``eval.*`` values. Light to import (no torch): the report uses it.
"""
from __future__ import annotations

import json

import yaml


class DuplicateKeyError(yaml.YAMLError):
    """A key given twice in one mapping; ``key`` (dotted), ``lines`` (1-based, first and second)."""

    def __init__(self, key: str, lines: tuple[int, int]):
        super().__init__(f"key {key!r} is given twice, on lines {lines[0]} and {lines[1]}; keep one of them")
        self.key, self.lines = key, lines


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a mapping with a repeated key (:class:`DuplicateKeyError`)."""

    def construct_document(self, node):
        self._paths = {}
        self._name(node, "")
        return super().construct_document(node)

    def _name(self, node, path: str) -> None:
        """Record the dotted path of every mapping under ``node`` (for the messages)."""
        if isinstance(node, yaml.MappingNode):
            self._paths[id(node)] = path
            for key, value in node.value:
                label = key.value if isinstance(key, yaml.ScalarNode) else "?"
                self._name(value, f"{path}{label}.")
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self._name(item, f"{path.rstrip('.')}[{i}].")

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}  # key -> its line
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key, line = self.construct_object(key_node, deep=True), key_node.start_mark.line + 1
                try:
                    if key in seen:
                        raise DuplicateKeyError(f"{self._paths.get(id(node), '')}{key}", (seen[key], line))
                    seen[key] = line
                except TypeError:  # an unhashable key: SafeLoader's own error follows
                    continue
        return super().construct_mapping(node, deep=deep)


def flatten(mapping: dict, prefix: str = "") -> dict[str, object]:
    """``{"model": {"pe": "geope"}, "eval": {"tta": {"flips": False}}}`` -> ``{"model.pe": "geope",
    "eval.tta.flips": False}``: every leaf of a nested mapping by its dotted key (a list is a value, an
    empty mapping has no leaf)."""
    out: dict[str, object] = {}
    for key, value in mapping.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def value_text(value) -> str:
    """A config value as an override writes it (YAML): a string as it is, anything else as JSON (``null``,
    ``true``, ``4``, ``[1.0, 1.1]``)."""
    return value if isinstance(value, str) else json.dumps(value)


def load_yaml(text: str):
    """The document of ``text``, as ``yaml.safe_load`` gives it, but a repeated key is a DuplicateKeyError."""
    return yaml.load(text, Loader=UniqueKeyLoader)
