"""pointgeope/commands/: one thin module per command, all of them in ``pointgeope --help``, none heavy to import."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import pointgeope.commands
from pointgeope.cli import COMMANDS, build_parser, command_modules

HEAVY = ("torch", "h5py", "open3d", "pandas", "matplotlib", "pointgeope.engine", "pointgeope.model",
         "pointgeope.data", "pointgeope.h5", "data_prep.prepare", "data_prep.synth.dataset")


def test_every_command_module_is_a_command_of_the_same_shape():
    folder = Path(pointgeope.commands.__file__).parent
    names = sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__")
    assert sorted(COMMANDS) == names
    assert [m.__name__.rsplit(".", 1)[1] for m in command_modules()] == list(COMMANDS)
    choices = build_parser()._subparsers._group_actions[0].choices
    assert list(choices) == list(COMMANDS)
    for module in command_modules():
        assert module.__doc__.strip() and isinstance(module.HELP, str) and "\n" not in module.HELP
        assert callable(module.add_arguments) and callable(module.main)


def test_command_modules_import_their_implementation_inside_main():
    for path in sorted(Path(pointgeope.commands.__file__).parent.glob("*.py")):
        for node in ast.parse(path.read_text()).body:  # module level only
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert not name.startswith(HEAVY), f"{path}: imports {name} at module level"


def test_the_command_line_imports_neither_torch_nor_h5py():
    code = "import sys, pointgeope.cli; print(sorted(m for m in ('torch', 'h5py', 'open3d') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_overrides_on_both_sides_of_the_options_are_all_kept_in_order(capsys):
    """``optim.lr=0.1 --run-dir R train.epochs=3`` ended in "unrecognized arguments: train.epochs=3"."""
    import pytest

    from pointgeope.commands import parse_args

    argv = ["train", "--config", "c.yaml", "optim.lr=0.1", "--run-dir", "R", "train.epochs=3", "--test-area", "1",
            "optim.lr=0.2"]
    args = parse_args(build_parser(), argv)
    assert (args.overrides, args.run_dir, args.test_area) == (["optim.lr=0.1", "train.epochs=3", "optim.lr=0.2"],
                                                              "R", 1)
    with pytest.raises(SystemExit):  # what is not an override is still refused
        parse_args(build_parser(), ["train", "--config", "c.yaml", "--test-area", "1", "a=1", "--bogus", "b=2"])
    assert capsys.readouterr().err.strip().endswith("error: unrecognized arguments: --bogus")
    # train.py has its own parser: the same
    repo = Path(__file__).resolve().parents[1]
    proc = subprocess.run([sys.executable, "train.py", "--config", "configs/demo.yaml", "optim.lr=0.1", "--run-dir",
                           "R", "train.epochs=0", "--test-area", "1"], cwd=repo, capture_output=True, text=True,
                          timeout=120, check=False)
    assert (proc.returncode, proc.stderr.strip()) == (
        2, "train.py: error: override 'train.epochs=0': train.epochs: expected an integer >= 1, got 0")


def test_a_key_given_twice_on_the_command_line_is_one_warning_line(tmp_path, capsys):
    """``optim.lr=0.1 ... optim.lr=0.2`` took the last silently, and ``data.root=A --data-root B`` took B. The
    last still wins (a command line appends to a common list), and one warning line names both."""
    from pointgeope.cli import main
    from pointgeope.commands import config_overrides

    said: list[str] = []
    got = config_overrides(["optim.lr=0.1", "train.epochs=1", "optim.lr=0.2", "data.root=A"],
                           {"--data-root": ("data.root", "B"), "--run-dir": ("train.run_dir", None)}, said.append)
    assert got == ["optim.lr=0.1", "train.epochs=1", "optim.lr=0.2", "data.root=A", "data.root=B"]
    assert said == ["warning: optim.lr is given twice ('optim.lr=0.1', then 'optim.lr=0.2'): the last is used",
                    "warning: data.root is given twice ('data.root=A', then --data-root B): --data-root is used"]
    assert config_overrides(["optim.lr=0.1", "data.root=A"], {"--data-root": ("data.root", None)}, said.append) \
        == ["optim.lr=0.1", "data.root=A"] and len(said) == 2                  # each once: no warning
    config = Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"
    assert main(["train", "--config", str(config), "--test-area", "1", "--run-dir", str(tmp_path / "run"),
                 "--data-root", str(tmp_path / "none"), "optim.lr=0.1", "optim.lr=0.2"]) == 2   # no data there
    out = capsys.readouterr().out.splitlines()
    assert out == ["warning: optim.lr is given twice ('optim.lr=0.1', then 'optim.lr=0.2'): the last is used"], out


@pytest.mark.parametrize(("argv", "name"), [
    (["synth", "", "--size", "tiny"], "OUT"),
    (["prepare", "raw", ""], "out"),
    (["prepare", "", "out"], "raw"),
    (["predict", "run/area_1", "scan.npy", "--out", ""], "--out"),
    (["predict", "", "scan.npy", "--out", "o"], "MODEL"),
    (["predict", "run/area_1", "", "--out", "o"], "INPUT"),
    (["report", "run", "--out", ""], "--out"),
    (["report", ""], "RUN"),
    (["train", "--config", "", "--test-area", "1"], "--config"),
    (["evaluate", ""], "run"),
    (["ablate", "--config", "c.yaml", "--test-area", "1", "--presets", "geope", "--run-dir", ""], "--run-dir"),
    (["ablate", "--config", "", "--test-area", "1", "--presets", "geope"], "--config"),
    (["train", "--config", "c.yaml", "--test-area", "1", "--data-root", ""], "--data-root"),
    (["train", "--config", "c.yaml", "--test-area", "1", "--run-dir", ""], "--run-dir"),
    (["evaluate", "run/area_1", "--data-root", ""], "--data-root"),
    (["ablate", "--config", "c.yaml", "--test-area", "1", "--presets", "geope", "--data-root", ""], "--data-root"),
    (["viz", ""], "area"),
    (["viz", "Area_1.h5", "--room", "office_1", "--ply", ""], "--ply"),
    (["viz", "Area_1.h5", "--room", "office_1", "--screenshot", ""], "--screenshot"),
    (["viz", "Area_1.h5", "--list", "--pred", ""], "--pred"),
])
def test_an_empty_path_is_refused_not_taken_for_the_working_folder(tmp_path, monkeypatch, capsys, argv, name):
    """``Path("")`` is ``.``: ``synth ""`` (``"$OUT"`` unset) wrote its areas into the working folder, exit code 0,
    as did ``prepare RAW ""``, ``predict ... --out ""`` and ``report RUN --out ""``; an empty input was read as
    the working folder; ``--data-root ""`` was left out (``evaluate`` scored on the config's data root) and
    ``viz --ply ""`` or ``--screenshot ""`` was taken as not given (a window opened). Now argparse's one line
    names the argument, and nothing is written."""
    from pointgeope.cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:     # argparse's error: its usage, then the one line
        main(argv)
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"pointgeope {argv[0]}: error: argument {name}: expected a path, got an empty one (an unset "
                       "shell variable?); give the path, or . for the current folder"), err
    assert "Traceback" not in "\n".join(err) and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("blank", [" ", "\t", "  "])
@pytest.mark.parametrize(("argv", "name"), [
    (["synth", "{}", "--size", "tiny"], "OUT"),
    (["predict", "run/area_1", "scan.npy", "--out", "{}"], "--out"),
    (["report", "run", "--out", "{}"], "--out"),
    (["train", "--config", "c.yaml", "--test-area", "1", "--run-dir", "{}"], "--run-dir"),
    (["evaluate", "run/area_1", "--data-root", "{}"], "--data-root"),
    (["ablate", "--config", "c.yaml", "--test-area", "1", "--presets", "geope", "--run-dir", "{}"], "--run-dir"),
    (["viz", "Area_1.h5", "--room", "office_1", "--ply", "{}"], "--ply"),
])
def test_a_blank_path_is_refused_by_every_command_alike(tmp_path, monkeypatch, capsys, argv, name, blank):
    """A path of spaces or a tab (``"$A $B"``, both unset) is a mistake as an empty one is, and every command says
    it alike: ``synth " "`` made a folder named by a space in the working folder, ``ablate --run-dir " "`` too,
    while ``train --run-dir " "`` and ``--data-root " "`` were refused in other words (their override loses the
    spaces)."""
    from pointgeope.cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main([blank if a == "{}" else a for a in argv])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (f"pointgeope {argv[0]}: error: argument {name}: expected a path, got a blank one {blank!r} "
                       "(an unset shell variable?); give the path, or . for the current folder"), err
    assert list(tmp_path.iterdir()) == []


# One Ctrl-C that lands while the command line imports sys.argv[1] (the console script `pointgeope` and
# `python -m pointgeope` run these two lines of pointgeope.cli too).
STOP_IN_AN_IMPORT = """
import sys

class Stop:
    def find_spec(self, name, path=None, target=None):
        if name == sys.argv[1]:
            sys.meta_path.remove(self)
            raise KeyboardInterrupt
        return None

sys.meta_path.insert(0, Stop())
from pointgeope.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("module", ["argparse", "pointgeope.commands.viz", "numpy"])
def test_a_ctrl_c_while_the_command_line_is_imported_is_one_line(tmp_path, module):
    """Before: pointgeope/cli.py imported argparse and every command module at its top (viz's numpy with
    them, 0.1 to 0.3 s on a busy machine) before any handler, and a Ctrl-C then printed a 25-line traceback.
    cli.main now catches it from its first line; importing pointgeope.cli imports nothing of that."""
    done = subprocess.run([sys.executable, "-c", STOP_IN_AN_IMPORT, module, "report", str(tmp_path / "run"),
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120, check=False)
    assert (done.returncode, done.stderr) == (130, "pointgeope report: interrupted\n")
    assert not (tmp_path / "out").exists()
    code = "import sys, pointgeope.cli; print(sorted(m for m in ('argparse', 'numpy', 'pointgeope.commands') " \
           "if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_prog_of_a_command_line_not_parsed_yet():
    from pointgeope.cli import _prog

    assert _prog(["--debug", "report", "train"]) == "pointgeope report"
    assert _prog(["--version"]) == "pointgeope" and _prog(["nonsense"]) == "pointgeope"


def test_help_shows_the_docstrings_as_plain_text(capsys):
    """``--help`` printed the command modules' docstrings as written, in reST: ````pointgeope/data/normals.py````,
    ``writes into ``DIR``::``, ``:mod:`...``` in a terminal. Every command's help (and train.py's) now shows code in
    single backquotes and no reST, and keeps the words."""
    from pointgeope.commands import help_text

    assert help_text("See ``a.py`` and :func:`~pointgeope.x.f`, into ``DIR``::\n\n    table\n") == \
        "See `a.py` and `pointgeope.x.f`, into `DIR`:\n\n    table"
    for name in COMMANDS:
        with pytest.raises(SystemExit):
            build_parser().parse_args([name, "--help"])
        out = capsys.readouterr().out
        assert "``" not in out and not re.search(r":[a-z]+:`|::$", out, re.M), name
    with pytest.raises(SystemExit):
        build_parser().parse_args(["report", "--help"])
    assert "reads `RUN/area_K/metrics.json`\n(K = 1..6) and writes into `DIR`:\n" in capsys.readouterr().out
    done = subprocess.run([sys.executable, "train.py", "--help"], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0 and "Train one fold (`--test-area K`)" in done.stdout and "``" not in done.stdout


@pytest.mark.parametrize("line", [["-m", "pointgeope", "train", "--help"], ["train.py", "--help"]])
def test_help_without_docstrings_runs(line):
    """Under ``python -OO`` (or ``PYTHONOPTIMIZE=2``) modules have no docstrings: building the parser called
    ``None.strip()`` on the command's, and ``train.py --help`` (as any ``pointgeope`` command) ended in an
    AttributeError traceback. The commands' parsers build; their help lists every option."""
    done = subprocess.run([sys.executable, "-OO", *line], cwd=Path(__file__).resolve().parents[1],
                          capture_output=True, text=True, timeout=120, check=False)
    assert (done.returncode, done.stderr) == (0, "")
    assert all(option in done.stdout for option in ("--config", "--test-area", "--cv", "--data-root", "--force"))
