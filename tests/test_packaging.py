"""The package as pip builds it: its licence, shipped and declared as setuptools reads it without deprecation.

The wheel is built as ``pip wheel --no-build-isolation`` builds it (setuptools' ``build_meta``, this
environment's setuptools), from a copy of the files a source distribution holds, so the checkout keeps no
``build/`` or egg-info.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
import zipfile

import pytest
import yaml

import pointgeope
from tests.conftest import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def build_wheel(tmp_path) -> tuple[zipfile.ZipFile, str]:
    """The wheel of this checkout and what the build printed on stderr."""
    src, out = tmp_path / "src", tmp_path / "dist"
    src.mkdir()
    out.mkdir()
    for name in ("pyproject.toml", "README.md", *PYPROJECT["project"]["license-files"]):
        shutil.copy(REPO / name, src / name)
    for package in ("pointgeope", "data_prep"):
        shutil.copytree(REPO / package, src / package, ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta; "
                           "print(build_meta.build_wheel(sys.argv[1]))", str(out)],
                          cwd=src, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return zipfile.ZipFile(out / done.stdout.strip().splitlines()[-1]), done.stderr


def test_the_licence_is_one_spdx_name_with_its_text_in_the_repository():
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert PYPROJECT["project"]["license"] == cff["license"] == "MIT"
    files = PYPROJECT["project"]["license-files"]
    assert files == ["LICENSE"]
    text = (REPO / "LICENSE").read_text()
    assert text.startswith("MIT License\n") and "Copyright (c) 2026 the pointgeope authors" in text
    # project.license as an SPDX string and license-files are read from setuptools 77 on
    assert PYPROJECT["build-system"]["requires"] == ["setuptools>=77"]


@pytest.mark.slow
def test_the_wheel_carries_the_licence_and_builds_without_a_deprecation(tmp_path):
    """`license = { text = "MIT" }` warned on every build that setuptools stops reading it in 2027, and no
    licence text was shipped."""
    wheel, stderr = build_wheel(tmp_path)
    assert "deprecated" not in stderr.lower(), stderr[-3000:]
    info = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")).removesuffix("METADATA")
    assert wheel.read(info + "licenses/LICENSE") == (REPO / "LICENSE").read_bytes()
    metadata = wheel.read(info + "METADATA").decode().splitlines()
    assert {"License-Expression: MIT", "License-File: LICENSE"} <= set(metadata)
    assert f"Version: {pointgeope.__version__}" in metadata   # pyproject.toml reads it from the package
