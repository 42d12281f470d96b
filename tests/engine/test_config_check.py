"""The type check of config values (``engine.config_check``) reads an optional field in either spelling:
``Optional[int]`` (``typing.Union``) and ``int | None`` (``types.UnionType`` before Python 3.14). Before,
``int | None`` fell through to the plain types and refused every value, ``None`` too: a field declared in
the style the rest of the code uses made every config that set it an error."""
from __future__ import annotations

import dataclasses
from typing import Optional

import pytest

from pointgeope.engine.config_check import ConfigError, build, check_mapping, type_name


@dataclasses.dataclass
class Pep604:
    threads: int | None = None
    clip: float | None = 1.0


@dataclasses.dataclass
class Typing:
    threads: Optional[int] = None  # noqa: UP045 - the other spelling, on purpose
    clip: Optional[float] = 1.0  # noqa: UP045


@pytest.mark.parametrize("cls", [Pep604, Typing])
def test_an_optional_field_takes_its_type_and_none_in_either_spelling(cls):
    assert check_mapping({"threads": 2, "clip": 3}, cls, "c.yaml") == {"threads": 2, "clip": 3.0}
    assert check_mapping({"threads": None, "clip": "1e-4"}, cls, "c.yaml") == {"threads": None, "clip": 1e-4}
    assert build(cls, {"threads": 4}) == cls(threads=4, clip=1.0)


@pytest.mark.parametrize("cls", [Pep604, Typing])
def test_a_wrong_value_of_an_optional_field_names_both_options(cls):
    with pytest.raises(ConfigError, match=r"^c\.yaml: threads: expected int \| null, got 'two'$"):
        check_mapping({"threads": "two"}, cls, "c.yaml")


def test_the_type_names_of_both_spellings_are_the_same():
    assert type_name(float | None) == type_name(Optional[float]) == "float | null"  # noqa: UP045
