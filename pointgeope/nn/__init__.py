"""GeoPE for PyTorch Geometric users and for any dot-product attention.

- [`GeoPEPointTransformerConv`][pointgeope.nn.GeoPEPointTransformerConv]: `torch_geometric.nn.PointTransformerConv`
  with a `pe` argument (every single-layer preset of `pointgeope.model`); `pe="rpe"` is PyG's layer.
- [`knn_graph`][pointgeope.nn.knn_graph]: PyG's kNN graph on pointgeope's kNN (no torch-cluster or pyg-lib needed).
- [`geope_qk`][pointgeope.nn.geope_qk] / [`geope_attention`][pointgeope.nn.geope_attention]: rotate queries and
  keys, then any scaled dot product.

Imports `pointgeope.geope` and `pointgeope.model` only (never the data, engine, report or viewer code, nor
their dependencies: h5py, pandas, open3d, tensorboard, matplotlib). torch-geometric is imported when the layer
is first asked for, so `knn_graph` and the functional API run without it. Without torch-geometric the layer is
not an attribute (`hasattr` is False, `from pointgeope.nn import *` gives the rest), and asking for it by name
says what to install, in one line.
"""
import sys
from importlib import _bootstrap
from importlib.util import find_spec
from typing import TYPE_CHECKING

from pointgeope.nn.functional import geope_attention, geope_qk
from pointgeope.nn.knn import knn_graph

if TYPE_CHECKING:                                      # for type checkers and the API reference; imported lazily
    from pointgeope.nn.point_transformer_conv import GeoPEPointTransformerConv

# The torch-geometric versions the layer's tests passed with (`pointgeope info` prints them): the oldest
# (`make test-pyg-oldest`, pyproject.toml's lower bound; the Makefile reads it from this line) and the newest.
TESTED_PYG_VERSIONS = ("2.5.3", "2.8.1")

_LAYER = "GeoPEPointTransformerConv"
__all__ = ["knn_graph", "geope_qk", "geope_attention", "TESTED_PYG_VERSIONS"]
if find_spec("torch_geometric") is not None:           # a star import takes what can be imported
    __all__ += ["GeoPEPointTransformerConv"]
# the code of the import system's `from package import name` (importlib._bootstrap's, frozen: its module's
# name differs across Python versions, the code object does not)
_FROM_IMPORT = getattr(getattr(_bootstrap, "_handle_fromlist", None), "__code__", None)
_NEEDS_PYG = (f'pointgeope.nn.{_LAYER} needs torch-geometric (pip install "pointgeope[nn]"); knn_graph, geope_qk '
              "and geope_attention do not")


def __getattr__(name: str):
    """`GeoPEPointTransformerConv` on first use (it subclasses PyG's layer, so it needs torch-geometric).

    Without torch-geometric: an `AttributeError` saying what to install, so `hasattr` and introspection see no
    attribute; but an `ImportError` with that line where the import system asks (`from pointgeope.nn import
    GeoPEPointTransformerConv`: `importlib._bootstrap._handle_fromlist` calls `hasattr` first), since Python
    would replace an `AttributeError` there by its own "cannot import name", which does not say what to do."""
    if name != _LAYER:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        from pointgeope.nn.point_transformer_conv import GeoPEPointTransformerConv
    except ModuleNotFoundError as error:
        if not (error.name and error.name.split(".")[0] == "torch_geometric"):
            raise
        importing = sys._getframe(1).f_code is _FROM_IMPORT
        raise (ImportError if importing else AttributeError)(_NEEDS_PYG) from error
    return GeoPEPointTransformerConv
