"""What each install of pointgeope holds, and the one line a command prints when a package of the toolkit is missing.

Three installs (``pyproject.toml``, ``[project.optional-dependencies]``):

- ``pip install pointgeope``: torch and numpy. Enough for :mod:`pointgeope.geope`, :mod:`pointgeope.model`
  and :mod:`pointgeope.nn`'s ``knn_graph``, ``geope_qk`` and ``geope_attention`` (the point ops take
  pykdtree / scipy / numba where installed, else pure torch: ``pointgeope/model/ops/backends.py``).
- ``pip install "pointgeope[nn]"``: adds torch-geometric, for ``GeoPEPointTransformerConv``, and numba, its
  per-edge rotations in one pass on the CPU (``pointgeope/nn/frame_numba.py``; without numba the torch path).
- ``pip install "pointgeope[toolkit]"``: everything the commands (``pointgeope ...``, and ``train.py`` in a
  clone) need: the ``nn`` extra and the packages of :data:`TOOLKIT_MODULES`. ``pointgeope[all]`` adds LAS/LAZ
  (``las``). ``train.py`` and the recipes of ``configs/`` come with a clone of the repository, not the wheel.

A command that imports a missing package of the toolkit ends, through :func:`pointgeope.errors.run_command`
(the one place every command passes), as one line and exit code 2::

    pointgeope prepare: error: h5py is not installed; the commands and train.py need the toolkit's packages:
    pip install "pointgeope[toolkit]"

Nothing here imports a package: this module is read by the error path and by ``pointgeope info``.
"""
from __future__ import annotations

import importlib.util

# The import name of each package of the toolkit extra (and of the nn extra it includes) -> its distribution
# on PyPI, as pyproject.toml lists them (tests/test_extras.py checks that the two agree).
TOOLKIT_MODULES = {
    "torch_geometric": "torch-geometric",   # the PyG layer (the nn extra); a loader over PyG Data samples
    "scipy": "scipy",
    "h5py": "h5py",
    "pandas": "pandas",
    "tensorboard": "tensorboard",
    "yaml": "pyyaml",
    "tqdm": "tqdm",
    "matplotlib": "matplotlib",
    "PIL": "pillow",
    "numba": "numba",                       # the CPU FPS; the layer's per-edge pass (the nn extra)
    "pykdtree": "pykdtree",
    "open3d": "open3d",
}
INSTALL_TOOLKIT = 'pip install "pointgeope[toolkit]"'


def missing_toolkit_package(err: BaseException) -> str | None:
    """The distribution of the toolkit whose import raised ``err`` (a ``ModuleNotFoundError`` for the module,
    or for one of its submodules when the module itself is not installed), else ``None``: any other failed
    import (a missing submodule of an installed package) is a bug or a broken install."""
    if not isinstance(err, ModuleNotFoundError) or not err.name:
        return None
    top = err.name.split(".")[0]
    if top != err.name and importlib.util.find_spec(top) is not None:    # installed, a submodule missing:
        return None                                                       # a bug or a broken install
    return TOOLKIT_MODULES.get(top)


def toolkit_message(err: BaseException) -> str | None:
    """The one line for a command that failed on a missing package of the toolkit, else ``None``."""
    package = missing_toolkit_package(err)
    if package is None:
        return None
    return f"{package} is not installed; the commands and train.py need the toolkit's packages: {INSTALL_TOOLKIT}"


def missing_toolkit() -> list[str]:
    """The distributions of the toolkit that are not installed here (their metadata only; nothing imported)."""
    import importlib.metadata

    missing = []
    for package in TOOLKIT_MODULES.values():
        try:
            importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            missing.append(package)
    return missing
