"""Reading a config file's YAML: PyYAML's safe loader, except that a key given twice in one mapping is an
error instead of the last one winning silently::

    model:
      pe: geope      # line 2
      pe: rpe        # line 3 -> DuplicateKeyError: key 'model.pe' is given twice, on lines 2 and 3

YAML merge keys (``<<: *base``) still let a mapping override what it merges. A number that YAML 1.1 reads in
another base than it looks is an error too (:class:`AmbiguousNumberError`): ``epochs: 010`` is octal 8,
``epochs: 1:30`` base-60 90 (YAML 1.2 and every other reader: 10; text).

:func:`load_yaml_lines` also gives the line of every key (and list entry) by its dotted name, read from
PyYAML's node marks as the file is read, and :func:`key_line` finds the line of the key a message is about,
so that a refused key is named where the user edits it::

    configs/x.yaml:7: unknown key 'optim.learning_rate'; did you mean 'optim.lr'?

:func:`closest_key` is the key a mistyped one meant (``did you mean 'optim.lr'?``), :func:`flatten` names
every value of such a plain config by its dotted key (``model.pe``), and :func:`value_text` writes a value, as overrides
and messages name them: a fold's settings in the report, a test's ``eval.*`` values. Light to import (no torch): the
report uses it.
"""
from __future__ import annotations

import difflib
import json
import re
import unicodedata

import yaml


class DuplicateKeyError(yaml.YAMLError):
    """A key given twice in one mapping; ``key`` (dotted), ``lines`` (1-based, first and second)."""

    def __init__(self, key: str, lines: tuple[int, int]):
        super().__init__(f"key {key!r} is given twice, on lines {lines[0]} and {lines[1]}; keep one of them")
        self.key, self.lines = key, lines


class LineError(yaml.YAMLError):
    """A problem of the text at ``line`` (1-based), said as ``FILE:LINE: message``."""

    def __init__(self, message: str, line: int):
        super().__init__(message)
        self.line = line


class AmbiguousNumberError(LineError):
    """A number that YAML 1.1 reads in another base than it looks: ``010`` (octal: 8), ``1:30`` (base 60: 90).
    YAML 1.2 reads both otherwise (``010`` is 10), so a config refuses them."""

    def __init__(self, text: str, value, base: str, line: int):
        super().__init__(f"{text!r} is a YAML 1.1 {base} number, read as {value}: write {value} if that is meant "
                         f"(or quote {text!r} for text)", line)


class InvisibleCharacterError(LineError):
    """A space or format character other than the plain space outside a comment (a no-break space pasted from a
    web page or a PDF, a zero-width space): YAML reads it as text, so ``lr:\u00a00.1`` is the string
    ``'lr:\xa00.1'`` and an indentation by it no indentation; the message names it and its column."""


_COMMENT = re.compile(r"(?:^|[ \t])#")  # YAML: a comment follows a space or tab, not a no-break space


def invisible_character(text: str) -> None:
    """Raise :class:`InvisibleCharacterError` at the first character of Unicode category Zs or Cf but the plain
    space (and a byte-order mark that opens the text) outside the comments of ``text``."""
    for number, line in enumerate(text.removeprefix("\ufeff").splitlines(), 1):
        for column, char in enumerate(_COMMENT.split(line, 1)[0], 1 + (number == 1 and text[:1] == "\ufeff")):
            if char != " " and unicodedata.category(char) in ("Zs", "Cf"):
                name = unicodedata.name(char, "a format character").lower()
                raise InvisibleCharacterError(f"column {column} holds a {name} (U+{ord(char):04X}), which YAML does "
                                              "not read as a space (pasted from a web page or a PDF?): type a plain "
                                              "space there, or delete it", number)


# YAML 1.1's octal (0 then octal digits) and base-60 (digits:digits) numbers, which PyYAML's resolver reads
_OTHER_BASE = {"octal": re.compile(r"[-+]?0[0-7_]+"),
               "base-60": re.compile(r"[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?")}


class UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a mapping with a repeated key (:class:`DuplicateKeyError`)."""

    def construct_document(self, node):
        self._paths, self.lines, self._walked = {}, {}, set()
        self._name(node, "")
        return super().construct_document(node)

    def _name(self, node, path: str) -> None:
        """Record the dotted path of every mapping under ``node`` (for the messages), and in ``lines`` the
        1-based line of every key and list entry by its dotted name (``model.pe``, ``model.planes[1]``). A
        key that holds a dot itself (``optim.lr: 0.5`` at the top, an override's form) is recorded quoted,
        ``"'optim.lr'"`` (:func:`literal_name`), so that it does not take the line of ``optim:``'s ``lr``. A key
        that YAML reads as another type (``yes``, ``on``: true; ``1``) is recorded under that value too, the
        name the config's messages give it (``data.True``). A node is walked once: an alias (``*a``) names the
        anchor's node again, so aliases of aliases were walked 9^12 times (a hang) and an alias inside its own
        anchor (``a: &a [*a]``) without end (RecursionError); the entries under an alias keep the anchor's lines."""
        if id(node) in self._walked:
            return
        self._walked.add(id(node))
        if isinstance(node, yaml.MappingNode):
            self._paths[id(node)] = path
            for key, value in node.value:
                label = key.value if isinstance(key, yaml.ScalarNode) else "?"
                label = literal_name(label) if "." in label else label
                self.lines.setdefault(f"{path}{label}", key.start_mark.line + 1)
                if isinstance(key, yaml.ScalarNode) and key.tag.rpartition(":")[2] in ("bool", "int", "float", "null"):
                    self.lines.setdefault(f"{path}{self.construct_object(key)}", key.start_mark.line + 1)
                self._name(value, f"{path}{label}.")
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                self.lines.setdefault(f"{path.rstrip('.')}[{i}]", item.start_mark.line + 1)
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

    def construct_number(self, node):
        """An int or float scalar, refusing YAML 1.1's octal and base-60 forms (:class:`AmbiguousNumberError`)."""
        construct = self.construct_yaml_int if node.tag.endswith(":int") else self.construct_yaml_float
        value = construct(node)
        for base, form in _OTHER_BASE.items():
            if form.fullmatch(node.value):
                raise AmbiguousNumberError(node.value, value, base, node.start_mark.line + 1)
        return value


UniqueKeyLoader.add_constructor("tag:yaml.org,2002:int", UniqueKeyLoader.construct_number)
UniqueKeyLoader.add_constructor("tag:yaml.org,2002:float", UniqueKeyLoader.construct_number)


def literal_name(key: str) -> str:
    """The name in :func:`load_yaml_lines`'s table of a key that holds a dot (``'optim.lr'``, quoted)."""
    return f"'{key}'"


def dotted_key_message(where: str, lines: dict | None, prefix: str, key: str, value) -> str:
    """The refusal of a key holding a dot in a file (``optim.lr: 0.5``; ``prefix`` the section it is in,
    ``""`` at the top), at its own line, with the nested form to write instead."""
    line, name = (lines or {}).get(f"{prefix}{literal_name(key)}"), prefix + key
    *sections, leaf = name.split(".")
    shown = "..." if isinstance(value, (dict, list)) else value_text(value)
    under = " -> ".join(f"'{s}:'" for s in sections)
    return (f"{where if line is None else f'{where}:{line}'}: unknown key {name!r}: a dotted name is an override's "
            f"form ({name}={shown} on the command line); in a file, write '{leaf}: {shown}' under {under}")


def _initials(name: str) -> str:
    return "".join(token[0] for token in name.split("_") if token)


def _similarity(typed: str, known: str) -> float:
    """How likely ``known`` is the key meant by ``typed``, in ``[0, 1]``: the best of the spelling
    similarity (difflib ratio: ``weight_decai`` ~ ``weight_decay``), an abbreviation either way
    (``lr`` = initials of ``learning_rate``), a prefix (``epoch`` ~ ``epochs``) and the shared
    ``_``-separated words (``decay`` ~ ``weight_decay``)."""
    a, b = typed.lower(), known.lower()
    score = difflib.SequenceMatcher(None, a, b).ratio()
    if "_" in a and _initials(a) == b or "_" in b and _initials(b) == a:
        score = max(score, 0.9)
    if len(a) >= 2 and len(b) >= 2 and (a.startswith(b) or b.startswith(a)):
        score = max(score, 0.7 + 0.2 * min(len(a), len(b)) / max(len(a), len(b)))
    words_a, words_b = set(a.split("_")), set(b.split("_"))
    shared = words_a & words_b
    if shared:
        score = max(score, 0.6 + 0.3 * len(shared) / len(words_a | words_b))
    return score


def closest_key(typed: str, known: list[str], cutoff: float = 0.6) -> str | None:
    """The key of ``known`` (one section's keys) most likely meant by ``typed``, or ``None``:
    ``closest_key("learning_rate", ["name", "lr", ...]) == "lr"``."""
    if not known:
        return None
    best = max(known, key=lambda k: _similarity(typed, k))
    return best if _similarity(typed, best) >= cutoff else None


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


def quote_hint(tp, value) -> str:
    """What a text key (``tp`` is ``str``: a folder name) given a date, a number or a boolean is told, as YAML
    reads ``run_dir: 2024-01-01``, ``0001`` or ``yes`` unquoted; ``""`` for any other key or value."""
    if tp is not str or value is None or isinstance(value, (list, dict)):
        return ""
    return "; YAML reads a date, a number or yes/no/on/off unquoted as such: quote the text for a name ('2024-01-01')"


def value_text(value) -> str:
    """A config value as an override writes it (YAML): a string as it is, anything else as JSON (``null``,
    ``true``, ``4``, ``[1.0, 1.1]``)."""
    return value if isinstance(value, str) else json.dumps(value)


def load_yaml(text: str):
    """The document of ``text``, as ``yaml.safe_load`` gives it, but a repeated key is a DuplicateKeyError."""
    return load_yaml_lines(text)[0]


def load_yaml_lines(text: str) -> tuple[object, dict[str, int]]:
    """``(document, lines)``: the document of ``text`` (:func:`load_yaml`) and the 1-based line of each of
    its keys and list entries by dotted name: ``"model:\n  planes:\n  - 16\n"`` -> ``{"model": 1,
    "model.planes": 2, "model.planes[0]": 3}`` (an empty document: ``{}``)."""
    invisible_character(text)
    loader = UniqueKeyLoader(text)
    try:
        return loader.get_single_data(), getattr(loader, "lines", {})
    finally:
        loader.dispose()


# a dotted config key as messages name it, with an optional entry: model.pe, model.planes[2], eval.tta.scales
_KEY = re.compile(r"(?<![\w./-])([a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)+)(\[\d+\])?")


def key_line(lines: dict[str, int], text: str):
    """The value of ``lines`` (:func:`load_yaml_lines`'s, or any mapping of dotted keys) for the first
    config key named in ``text`` that it holds, an entry (``model.planes[2]``) falling back to its key;
    ``None`` when it holds none: ``key_line({"model.pe": 3}, "model.pe=rpe: ...") == 3``."""
    for match in _KEY.finditer(text):
        key, entry = match.group(1), match.group(2) or ""
        for name in (key + entry, key):
            if name in lines:
                return lines[name]
    return None


def at_line(where: str, lines: dict | None, key: str, message: str = "") -> str:
    """``where`` (a file) as ``FILE:LINE`` with the line of the dotted ``key``, or of its entry that ``message``
    names (``model.planes[2]: ...``; another key the message names is not looked up); ``where`` alone when
    ``lines`` has neither (an override, a checkpoint's config, a key the file does not set)."""
    own = {name: line for name, line in (lines or {}).items() if name == key or name.startswith(f"{key}[")}
    line = key_line(own, message) or own.get(key)
    return where if line is None else f"{where}:{line}"
