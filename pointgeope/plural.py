"""A count with its noun in the right number: ``1 room``, ``2 rooms``, ``1,200 points``.

The one place the toolkit's output lines make a plural, so that no line reads ``1 threads``. English plurals of
the nouns these lines count: ``+s``, ``+es`` after s/x/ch/sh (``class`` -> ``classes``, ``batch`` ->
``batches``); an irregular noun passes its plural (``counted(n, "process", "processes")`` is the same rule;
``counted(n, "index", "indices")`` is not). The first few of a list and how many more: :func:`first_of`.
"""
from __future__ import annotations

from collections.abc import Iterable


def plural(noun: str) -> str:
    """The regular English plural of ``noun``: ``room`` -> ``rooms``, ``class`` -> ``classes``."""
    return noun + ("es" if noun.endswith(("s", "x", "ch", "sh")) else "s")


def counted(n: int, noun: str, many: str | None = None) -> str:
    """``n`` with thousands separators and ``noun`` in the number ``n`` asks for: ``noun`` when ``n == 1``,
    else ``many`` (default: :func:`plural` of ``noun``). ``counted(1, "room") == "1 room"``,
    ``counted(0, "room") == "0 rooms"``, ``counted(1200, "point") == "1,200 points"``."""
    return f"{n:,} {noun if n == 1 else (many or plural(noun))}"


def agreeing(n: int, one: str, many: str) -> str:
    """The word that agrees with a count ``n`` that the line says beside it: ``one`` when ``n == 1``, else
    ``many``. For the verbs and pronouns of :func:`counted`'s noun: ``f"{counted(n, 'trial')} failed; see
    {agreeing(n, 'its', 'their')} train.log"``, ``f"{names} {agreeing(len(names), 'differs', 'differ')}"``."""
    return one if n == 1 else many


def first_of(items: Iterable[object], most: int, sep: str = ", ", noun: str | None = None) -> str:
    """The first ``most`` of ``items`` (each as ``str`` writes it) joined by ``sep``, then how many more as one
    entry more (of ``noun``, where given): ``first_of("abcdefg", 3) == "a, b, c, and 4 more"``,
    ``first_of("ab", 3) == "a, b"``, ``first_of(keys, 1, noun="key") == "a, and 1 more key"``, ``first_of(paths,
    3, " ")`` (a shell's list), ``first_of(diffs, 8, "; ")``. The one way a line says a list it does not say
    whole: no line cuts one with a bare ``...`` that leaves the count out. Only the shown items are made text
    (a list of 100,000 rooms on an error path costs ``most`` calls of ``str``)."""
    items = list(items)
    left = len(items) - most
    more = "more" if noun is None else f"more {noun if left == 1 else plural(noun)}"
    return sep.join([str(item) for item in items[:most]] + ([f"and {left:,} {more}"] if left > 0 else []))
