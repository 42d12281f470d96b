"""Tests of pointgeope/engine/config_reference.py: the key reference that the configuration page is built from."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from pointgeope.engine.config import Config, config_to_dict, load_config
from pointgeope.engine.config_ranges import RANGES
from pointgeope.engine.config_reference import config_keys, field_comments, markdown_tables


@dataclass
class _Commented:
    plain: int = 1
    trailing: int = 2                       # on the line
    wrapped: str = "a"                      # starts here,
    #                                         and goes on here
    # above the field,
    # on two lines
    above: list[int] = field(default_factory=lambda: [1])
    both: bool = True  # after
    # a comment above the next field, not a continuation of both's
    last: float = 0.5


def test_field_comments_on_the_line_continued_and_above():
    assert field_comments(_Commented) == {
        "plain": "", "trailing": "on the line", "wrapped": "starts here, and goes on here",
        "above": "above the field, on two lines", "both": "after",
        "last": "a comment above the next field, not a continuation of both's"}


def _leaf_keys(tree: dict, prefix: str = "") -> list[str]:
    """The dotted keys of the config as it is saved (``config_to_dict``), in order: an independent listing."""
    keys = []
    for name, value in tree.items():
        keys += _leaf_keys(value, f"{prefix}{name}.") if isinstance(value, dict) else [prefix + name]
    return keys


def test_every_key_once_in_order_with_a_description():
    rows = config_keys()
    assert [r.key for r in rows] == _leaf_keys(config_to_dict(Config()))
    assert {"data.grid_size", "model.pe", "eval.tta.scales", "eval.class_mean"} <= {r.key for r in rows}
    assert [r.key for r in rows if not r.description] == [], "describe each new key in a comment beside it"


def test_types_defaults_and_ranges_are_those_the_config_checks():
    rows = {r.key: r for r in config_keys()}
    assert (rows["train.epochs"].type, rows["train.epochs"].default,
            rows["train.epochs"].values) == ("int", "100", "in [1, 1000000]")
    assert ((rows["model.planes"].default, rows["model.planes"].values)
            == ("[32, 64, 128, 256, 512]", "each in [1, 16384]"))
    assert (rows["optim.grad_clip"].type, rows["optim.grad_clip"].default) == ("float | null", "null")
    assert rows["data.augment"].type == "'ptv1' | 'pointcept' | 'none' | 'pointcept_ptv3'"
    assert rows["data.augment"].values == ""
    assert rows["optim.momentum"].values == "in [0, 1]" and rows["data.color"].default == "true"
    assert {key for key, r in rows.items() if r.values} == set(RANGES)
    # each default as the page writes it, given back as an override, loads to the default itself
    for r in rows.values():
        loaded, default = load_config(None, [f"{r.key}={r.default}"]), Config()
        for part in r.key.split("."):
            loaded, default = getattr(loaded, part), getattr(default, part)
        assert loaded == default, r.key


def test_the_tables_have_a_row_per_key_and_escape_pipes():
    text = markdown_tables()
    assert [line.split(" | ")[0] for line in text.splitlines() if line.startswith("| `")] == \
        [f"| `{r.key}`" for r in config_keys()]
    assert text.count("### `") == len(dataclasses.fields(Config))
    assert r"'rpe' \| 'geope'" in text and "[rgb \\| xyz]" in text
