"""GeoPE for PyTorch Geometric users and for any dot-product attention.

- ``knn_graph``: PyG's kNN graph on pointgeope's kNN (no torch-cluster or pyg-lib needed).

Imports ``pointgeope.geope`` and ``pointgeope.model`` only (never the data or engine code).
"""
from pointgeope.nn.knn_graph import knn_graph

__all__ = ["knn_graph"]
