"""GeoPE for PyTorch Geometric users and for any dot-product attention.

- [`GeoPEPointTransformerConv`][pointgeope.nn.GeoPEPointTransformerConv]: `torch_geometric.nn.PointTransformerConv`
  with a `pe` argument (every single-layer preset of `pointgeope.model`); `pe="rpe"` is PyG's layer.
- [`knn_graph`][pointgeope.nn.knn_graph]: PyG's kNN graph on pointgeope's kNN (no torch-cluster or pyg-lib needed).
- [`geope_qk`][pointgeope.nn.geope_qk] / [`geope_attention`][pointgeope.nn.geope_attention]: rotate queries and
  keys, then any scaled dot product.

Imports `pointgeope.geope` and `pointgeope.model` only (never the data, engine, report or viewer code, nor
their dependencies: h5py, pandas, open3d, tensorboard, matplotlib). torch-geometric is imported when the layer
is first asked for, so `knn_graph` and the functional API run without it. Without torch-geometric the layer's
name is a stand-in (`from pointgeope.nn import *` and `from pointgeope.nn import GeoPEPointTransformerConv`
work) whose construction or subclassing raises an `ImportError` saying what to install, in one line.
"""
from importlib.util import find_spec
from typing import TYPE_CHECKING

from pointgeope.nn.functional import geope_attention, geope_qk
from pointgeope.nn.knn import knn_graph

# The torch-geometric versions the layer's tests passed with (`pointgeope info` prints them): the oldest
# (`make test-pyg-oldest`, pyproject.toml's lower bound; the Makefile reads it from this line) and the newest.
TESTED_PYG_VERSIONS = ("2.5.3", "2.8.1")

_LAYER = "GeoPEPointTransformerConv"
__all__ = ["knn_graph", "geope_qk", "geope_attention", "TESTED_PYG_VERSIONS", "GeoPEPointTransformerConv"]
_NEEDS_PYG = (f'pointgeope.nn.{_LAYER} needs torch-geometric (pip install "pointgeope[nn]"); knn_graph, geope_qk '
              "and geope_attention do not")
_HAS_PYG = find_spec("torch_geometric") is not None

if not _HAS_PYG:
    class GeoPEPointTransformerConv:
        """Stands for the layer without torch-geometric: constructing or subclassing it says what to install."""

        def __init__(self, *args, **kwargs):
            raise ImportError(_NEEDS_PYG)

        def __init_subclass__(cls, **kwargs):
            raise ImportError(_NEEDS_PYG)
if TYPE_CHECKING:           # for type checkers and the API reference (read after the stand-in); imported lazily
    from pointgeope.nn.point_transformer_conv import GeoPEPointTransformerConv


def __getattr__(name: str):
    """`GeoPEPointTransformerConv` on first use, with torch-geometric (the layer subclasses PyG's, so importing it
    imports torch-geometric); without it the stand-in above is a plain attribute and this is not called."""
    if name != _LAYER:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from pointgeope.nn.point_transformer_conv import GeoPEPointTransformerConv
    return GeoPEPointTransformerConv
