"""Point Transformer with GeoPE vector attention: point ops, attention layer, segmentation network.

Imports only torch, Triton (where it imports) and the package's shared top-level modules (``geope``,
``constants``, ``errors``, ``radix``), never the data code.
"""
from pointgeope.model.attention import PRESETS, PointTransformerLayer, PositionalEncoding
from pointgeope.model.config import ModelConfig
from pointgeope.model.network import OpsBackends, PointTransformerBlock, PointTransformerSeg
from pointgeope.model.ops import HierarchySpec, PointHierarchy

__all__ = ["ModelConfig", "PointTransformerSeg", "PointTransformerLayer", "PointTransformerBlock", "PositionalEncoding",
           "PRESETS", "OpsBackends", "HierarchySpec", "PointHierarchy"]
