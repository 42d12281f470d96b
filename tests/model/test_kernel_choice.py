"""Tests of pointgeope/model/kernel_choice.py: the three switches read by one function into one frozen choice,
booleans read one way, a forced choice confined to its context (and seen by a thread started in a copy of it)."""
from __future__ import annotations

import contextvars
import dataclasses
import re
import threading
from pathlib import Path

import pytest

from pointgeope.errors import UserError
from pointgeope.model import kernel_choice
from pointgeope.model.kernel_choice import KernelChoice, current, forced, from_environment

PACKAGE = Path(kernel_choice.__file__).resolve().parents[1]


@pytest.mark.parametrize("raw, want", [("1", True), ("true", True), ("On", True), ("YES", True), (" yes ", True),
                                       ("0", False), ("false", False), ("OFF", False), ("no", False)])
def test_every_switch_reads_the_same_words(raw, want):
    env = {"POINTGEOPE_COMPILE": raw, "TRITON_INTERPRET": raw}
    assert from_environment(env) == KernelChoice(None, compile=want, interpret=want)


def test_unset_switches_take_their_defaults_and_the_choice_is_frozen():
    choice = from_environment({})
    assert choice == KernelChoice(path=None, compile=True, interpret=False)
    with pytest.raises(dataclasses.FrozenInstanceError):
        choice.path = "torch"
    assert from_environment({"POINTGEOPE_KERNELS": " Torch "}).path == "torch"


@pytest.mark.parametrize("name", ["POINTGEOPE_COMPILE", "TRITON_INTERPRET"])
def test_another_value_is_one_line_naming_the_variable_and_the_accepted_words(name):
    with pytest.raises(UserError) as raised:
        from_environment({name: "garbage"})
    assert str(raised.value) == (f"{name}: expected one of 1, true, on, yes (on) or 0, false, off, no (off), or "
                                 "unset, got 'garbage'")
    with pytest.raises(UserError, match=r"^POINTGEOPE_KERNELS: expected one of triton, torch"):
        from_environment({"POINTGEOPE_KERNELS": "cuda"})


def test_the_environment_is_seen_at_the_next_call(monkeypatch):
    monkeypatch.setenv("POINTGEOPE_COMPILE", "off")
    assert current().compile is False
    monkeypatch.setenv("POINTGEOPE_COMPILE", "on")
    assert current().compile is True


def test_a_forced_path_holds_in_its_context_only_and_leaves_the_environment(monkeypatch):
    monkeypatch.setenv("POINTGEOPE_KERNELS", "torch")
    seen = {}

    def look(key):
        seen[key] = current().path

    with forced("triton") as choice:
        assert choice.path == current().path == "triton"
        import os
        assert os.environ["POINTGEOPE_KERNELS"] == "torch"            # no write to the environment
        plain = threading.Thread(target=look, args=("plain",))
        inherited = threading.Thread(target=contextvars.copy_context().run, args=(look, "copied"))
        for t in (plain, inherited):
            t.start()
            t.join()
    assert current().path == "torch"
    assert seen == {"plain": "torch", "copied": "triton"}    # a new thread has its own context unless given one


def test_the_prefetch_thread_sees_the_choice_of_the_block_that_started_it(monkeypatch):
    from pointgeope.engine.prefetch import Prefetch

    monkeypatch.delenv("POINTGEOPE_KERNELS", raising=False)
    with forced("torch"):
        with Prefetch((current().path for _ in range(2)), depth=1) as ahead:
            assert list(ahead) == ["torch", "torch"]


def test_only_the_choice_module_names_the_switches():
    """``POINTGEOPE_KERNELS``, ``POINTGEOPE_COMPILE`` and ``TRITON_INTERPRET`` as string literals (how the
    environment is read) appear in one module of the package; elsewhere only in prose and messages."""
    literal = re.compile(r"""["'](POINTGEOPE_KERNELS|POINTGEOPE_COMPILE|TRITON_INTERPRET)["']""")
    readers = {path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py")
               if literal.search(path.read_text())}
    assert readers == {"model/kernel_choice.py"}
    environ = re.compile(r"environ[^\n]*(KERNELS|COMPILE|INTERPRET)|getenv[^\n]*(KERNELS|COMPILE|INTERPRET)")
    assert [p.name for p in PACKAGE.rglob("*.py") if environ.search(p.read_text())] == []
