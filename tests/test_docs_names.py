"""What the pages name exists: an option a page gives `pointgeope <command>` or `train.py` is one of that command's
options (and a synopsis of a command names them all), a `make` target is the Makefile's, a config key a page
names is a key of the config, a file of the repository a page names is in it, and a link to a page of docs/ from
outside the site (a docstring, the changelog, a results folder's README) finds its page and heading.

The site's own links are `mkdocs build --strict`'s (tests/test_docs_site.py, CI), the README's are
tests/test_docs.py's; a reader copies a command or a key from any page, so each is checked where it is written.
Each checker is a function of a page's text, shown on a planted mistake first.
"""
from __future__ import annotations

import argparse
import functools
import re
import subprocess
from pathlib import Path

import pytest

from pointgeope.cli import COMMANDS, build_parser
from tests.test_docs import _slug

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
SECTIONS = ("data", "model", "optim", "train", "eval")
# dotted names of a config section's form that are no config key, each for its reason
NOT_KEYS = {
    "optim.learning_rate": "the mistyped key of the error examples",
    "eval.key": "the placeholder of `eval.key=value`",
    "data.normals": "report's difference key `data.normals.<area>`, a record of the data",
}
# what ends a file's name, never a config key's: `train.log`, `model.pt` are files
FILE_SUFFIXES = {"py", "pt", "pth", "log", "txt", "json", "csv", "yaml", "yml", "md", "h5", "ply", "npy", "las", "laz"}
# paths of the repository's form that are no file of it, each for its reason
NOT_FILES = {
    "configs/x.yaml": "a reader's own config in the error examples",
    "pointgeope/classes": "the name of the LAS variable-length record predict writes",
    "configs/s3dis/semseg-pt-v3m1-0-base.py": "Pointcept's config",
    "configs/_base_/default_runtime.py": "Pointcept's config",
}


@functools.cache
def _command_options() -> dict[str, set[str]]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    options = {name: set(p._option_string_actions) for name, p in sub.choices.items()}
    options["train.py"] = options["train"]  # train.py is the train command's parser (train.py, pointgeope/cli.py)
    return options


def _code(text: str) -> list[str]:
    """The shell text of a page: its fenced blocks' lines (continuations joined) and its code spans, each cut at
    `&&`, `;`, ` #` (a comment is a piece too: it may name a command), a lone ` & ` (a command sent to the
    background) and a ` | ` before a lowercase word (`| grep --color`: the next command's options), so that each
    piece holds one command (not at a `|` before a placeholder, `RUN/area_K | FILE.pt`, or within a choice,
    `--device auto|cpu`: a synopsis goes on with the command's options)."""
    fenced = re.findall(r"^```[a-z]*\n(.*?)^```$", text, re.M | re.S)
    spans = re.findall(r"``?([^`\n]+)``?", re.sub(r"^```[a-z]*\n.*?^```$", "", text, flags=re.M | re.S))
    lines = [line for block in fenced for line in block.replace("\\\n", " ").splitlines()] + spans
    return [piece for line in lines for piece in re.split(r"&&|;| #|\s&\s|\s\|\s+(?=[a-z])", line)]


def unknown_options(text: str, options: dict[str, set[str]]) -> list[str]:
    """`<command> --option` of the page's commands that the command does not take."""
    found = []
    command = re.compile(rf"(?:\bpointgeope\s+({'|'.join(COMMANDS)})\b|(?<![\w/])(train\.py)\b)(.*)")
    for piece in _code(text):
        for m in command.finditer(piece):
            name = m.group(1) or m.group(2)
            for option in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", m.group(3)):
                if option not in options[name]:
                    found.append(f"{name} {option}")
    return found


def unknown_make_targets(text: str, targets: set[str]) -> list[str]:
    """`make <target>` of the page's commands that the Makefile has no rule for (not `apt install make gcc`: make
    the package)."""
    return [m.group(1) for piece in _code(text) for m in re.finditer(r"(?<![\w-])(?<!install )make\s+([a-z][\w-]*)",
                                                                      piece) if m.group(1) not in targets]


@functools.cache
def _make_targets() -> set[str]:
    return set(re.findall(r"^([a-z][\w-]*):", (REPO / "Makefile").read_text(), re.M))


def synopsis_gaps(text: str, options: dict[str, set[str]]) -> list[str]:
    """The options a synopsis of a command (its optional ones written `[--option ...]`) leaves out, where a reader
    looks for all of them (`--help` and `--debug` aside: every command has them)."""
    found = []
    command = re.compile(rf"\bpointgeope\s+({'|'.join(COMMANDS)})\b(.*\[--.*)|(?<![\w/])(train\.py)\b(.*\[--.*)")
    for piece in _code(text):
        for m in command.finditer(piece):
            name, rest = (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))
            named = set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", rest))
            left = sorted(o for o in options[name] - named - {"--help", "--debug"} if o.startswith("--"))
            if left:
                found.append(f"{name}: {', '.join(left)}")
    return found


def unknown_keys(text: str, keys: set[str]) -> list[str]:
    """Dotted names of a config section (`optim.lr`, `model.ptv3.*`) that are no key, no key's section and no
    module of pointgeope (`data.check`); a call (`model.eval()`: no key is called) and a file name (`train.log`)
    are none."""
    found = []
    for m in re.finditer(rf"(?<![\w./-])((?:{'|'.join(SECTIONS)})\.[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)*)", text):
        name = m.group(1)
        prefix = text[m.end():m.end() + 1] == "*"  # model.geope_*: the keys that start so
        if text[m.end():m.end() + 1] == "(" or name.rsplit(".", 1)[1] in FILE_SUFFIXES:
            continue
        if (name in keys or name in NOT_KEYS or any(k.startswith(name + ("" if prefix else ".")) for k in keys)
                or (REPO / "pointgeope" / (name.replace(".", "/") + ".py")).is_file()):
            continue
        found.append(name)
    return found


def missing_files(text: str, files: set[str]) -> list[str]:
    """Repository paths (`bench/...`, `configs/...`, `pointgeope/...`) that are no file or folder of it; a path
    with a module's attribute (`bench/interleave.rounds`) names the module."""
    folders = {str(parent) for name in files for parent in Path(name).parents}
    found = []
    tops = "bench|configs|pointgeope|data_prep|examples|tests|\\.ci|docs"
    for m in re.finditer(rf"(?<![\w./-])((?:{tops})/[\w./*<>-]*[\w*>])", text):
        path = m.group(1)
        if re.search(r"[*<>]", path) or path in NOT_FILES:  # a pattern: bench/results/*.json, ptv3_<pe>.yaml
            continue
        module = re.sub(r"\.\w+$", "", path) + ".py"
        if path not in files and path not in folders and module not in files:
            found.append(path)
    return found


def _headings(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```$", "", page.read_text(), flags=re.M | re.S)
    return {_slug(h) for h in re.findall(r"^#+ (.+?)\s*$", text, re.M)}


def broken_links(name: str, text: str) -> list[str]:
    """The links of a file outside docs/ to a page of docs/ (`docs/gpu.md#measured`, or a markdown link relative to
    the file) whose page or heading does not exist."""
    here = (REPO / name).parent
    named = re.finditer(r"(?<![\w/.-])(docs/[\w/.-]+\.md)(?:#([\w-]+))?", text)
    targets = [("", m.group(1), m.group(2)) for m in named]
    if name.endswith(".md"):
        targets += [("link ", *m.groups()) for m in re.finditer(r"\]\(([^)\s#]+\.md)(?:#([\w-]+))?\)", text)
                    if not m.group(1).startswith(("http://", "https://"))]
    found = []
    for kind, path, anchor in targets:
        page = (REPO / path) if not kind else (here / path).resolve()
        if not page.is_file():
            found.append(f"{kind}{path}: no such page")
        elif anchor and anchor not in _headings(page):
            found.append(f"{kind}{path}#{anchor}: no such heading")
    return found


@functools.cache
def _tracked(*patterns: str) -> list[str]:
    return subprocess.run(["git", "ls-files", *patterns], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout.split()


def test_each_checker_finds_a_planted_mistake():
    options = {"predict": {"--out", "--format"}, "viz": {"--room"}, "train.py": {"--cv"}, "train": {"--cv"}}
    page = ("```bash\npointgeope predict RUN a.ply --out pred --formats npy && pointgeope viz A.h5 --room r\n"
            "python train.py --cv \\\n    --test-areas 5   # --not-an-option in a comment\n"
            "pointgeope predict RUN/area_K | FILE.pt  SCAN [--formats LIST]\n```\n"
            "Give `pointgeope viz A.h5 --list` a room; `--elsewhere` alone is no command's.\n")
    assert unknown_options(page, options) == ["predict --formats", "train.py --test-areas", "predict --formats",
                                                 "viz --list"]
    other_tools = ("```bash\npointgeope viz A.h5 --room r | grep --color=never x\npython train.py --cv 2>&1 | tee "
                   "--append log\npointgeope viz A.h5 --room r & tensorboard --logdir runs\n```\n")
    assert unknown_options(other_tools, options) == []    # the options of the command piped to or run beside
    assert synopsis_gaps(page, {**options, "predict": {"--out", "--format", "--tta", "--help"}}) == \
        ["predict: --format, --out, --tta"]  # its synopsis line names --formats alone; the other lines are none
    assert unknown_make_targets("```bash\nmake demo BACKBONE=ptv3   # then make test\n```\n`make tests`, "
                                "make it so", {"demo", "test"}) == ["tests"]
    assert unknown_make_targets("```bash\nsudo apt-get install make gcc\nsudo make tests\n```\n", {"demo"}) == \
        ["tests"]
    keys = {"optim.lr", "model.ptv3.enc_depths", "model.geope_base"}
    assert unknown_keys("`optim.lr=0.1 optim.lrate=1`, `model.ptv3.*`, `model.geope_*`, `model.geope_ratio`, "
                        "`pointgeope.model.x`, `data.check`, `train.py`", keys) == ["optim.lrate", "model.geope_ratio"]
    assert unknown_keys("call model.eval() first, and `data.to(device)`, not `model.evals`; the log is train.log, "
                        "the weights model.pt", keys) == ["model.evals"]     # calls and files are no keys
    files = {"bench/bench_fps.py", "bench/interleave.py", "configs/demo.yaml"}
    assert missing_files("`bench/bench_fps.py`, `bench/bench_fpss.py`, `bench/interleave.rounds`, `configs/`, "
                         "`bench/results/*.json`, `configs/demo.yml`", files) == ["bench/bench_fpss.py",
                                                                                 "configs/demo.yml"]
    assert broken_links("bench/results/gpu/README.md", "[a](../../../docs/gpu.md#measured), docs/gpu.md#no-such, "
                        "[b](../../../docs/gpus.md), see docs/install.md#which-install") == \
        ["docs/gpu.md#no-such: no such heading", "link ../../../docs/gpus.md: no such page"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_the_options_keys_and_files_a_page_names_exist(page):
    from pointgeope.engine.config_reference import config_keys

    text = page.read_text()
    options = _command_options()  # cached: one parser, one listing of the repository for every page
    found = {"options": unknown_options(text, options), "synopses": synopsis_gaps(text, options),
             "make": unknown_make_targets(text, _make_targets()),
             "keys": unknown_keys(text, {ref.key for ref in config_keys()}),
             "files": missing_files(text, set(_tracked()))}
    assert found == {"options": [], "synopses": [], "make": [], "keys": [], "files": []}


def test_links_to_the_docs_from_outside_the_site_resolve():
    names = [n for n in _tracked("*.md", "*.py", "*.yaml", "*.toml", "*.sh", "*.cff", "Makefile")
             if not n.startswith(("docs/", "tests/"))]  # the tests' names are data (planted, missing on purpose)
    assert len(names) > 100
    found = [f"{name}: {problem}" for name in names for problem in broken_links(name, (REPO / name).read_text())]
    assert found == []
