"""The package's lazy exports resolve, and reading HDF5 does not import torch."""
from __future__ import annotations

import subprocess
import sys

import pointgeope.data as data


def test_every_export_resolves_to_its_module():
    for name in data.__all__:
        obj = getattr(data, name)
        assert obj.__module__ == f"pointgeope.data.{data._EXPORTS[name]}"


def test_h5_reader_does_not_pull_in_torch():
    code = "import sys, pointgeope.data.h5; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
