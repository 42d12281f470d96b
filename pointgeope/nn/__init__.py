"""GeoPE for PyTorch Geometric users and for any dot-product attention.

- ``GeoPEPointTransformerConv``: ``torch_geometric.nn.PointTransformerConv`` with a ``pe`` argument
  (every single-layer preset of ``pointgeope.model``); ``pe="rpe"`` is PyG's layer.
- ``knn_graph``: PyG's kNN graph on pointgeope's kNN (no torch-cluster or pyg-lib needed).
- ``geope_qk`` / ``geope_attention`` (``functional``): rotate queries and keys, then any scaled dot product.

Imports ``pointgeope.geope`` and ``pointgeope.model`` only (never the data or engine code).
"""
from pointgeope.nn.functional import geope_attention, geope_qk
from pointgeope.nn.knn import knn_graph
from pointgeope.nn.point_transformer_conv import GeoPEPointTransformerConv

# The torch-geometric versions the layer's tests passed with (``pointgeope info`` prints them).
TESTED_PYG_VERSIONS = ("2.8.1",)

__all__ = ["GeoPEPointTransformerConv", "knn_graph", "geope_qk", "geope_attention", "TESTED_PYG_VERSIONS"]
