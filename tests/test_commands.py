"""pointgeope/commands/: one thin module per command, all of them in ``pointgeope --help``, none heavy to import."""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pointgeope.commands
from pointgeope.cli import COMMANDS, build_parser

HEAVY = ("torch", "h5py", "open3d", "pandas", "matplotlib", "pointgeope.engine", "pointgeope.model",
         "pointgeope.data", "pointgeope.h5", "data_prep.prepare", "data_prep.synth.dataset")


def test_every_command_module_is_a_command_of_the_same_shape():
    folder = Path(pointgeope.commands.__file__).parent
    names = sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__")
    assert sorted(m.__name__.rsplit(".", 1)[1] for m in COMMANDS) == names
    choices = build_parser()._subparsers._group_actions[0].choices
    assert list(choices) == [m.__name__.rsplit(".", 1)[1] for m in COMMANDS]
    for module in COMMANDS:
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
