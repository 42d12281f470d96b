"""Packages made "not installed" for a test's subprocess: put this folder first on its PYTHONPATH and name the
packages' import names, comma-separated, in POINTGEOPE_TEST_HIDE (e.g. ``h5py,yaml``).

Python imports ``sitecustomize`` at start-up. This one replaces the path finder of ``sys.meta_path`` by one
that does not find the named top-level modules (nor their submodules): ``import h5py`` then raises the
``ModuleNotFoundError`` of a missing package (``name == "h5py"``) and ``importlib.util.find_spec("h5py")`` is
``None``, as in an environment without it, while the files stay where they are.
"""
import importlib.machinery
import os
import sys

HIDDEN = frozenset(filter(None, os.environ.get("POINTGEOPE_TEST_HIDE", "").split(",")))


class HidingPathFinder(importlib.machinery.PathFinder):
    """The standard path finder, blind to the modules of ``HIDDEN``."""

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname.partition(".")[0] in HIDDEN:
            return None
        return super().find_spec(fullname, path, target)


sys.meta_path[:] = [HidingPathFinder if finder is importlib.machinery.PathFinder else finder
                    for finder in sys.meta_path]
