"""Point Transformer V3 (Pointcept's PT-v3m1) in plain torch: one concept per module.

``structure`` (the typed point batch), ``serialization`` (z-order and Hilbert codes), ``sparse_conv``
(submanifold convolution with spconv's weights), ``patches`` (the flash path's patch partition),
``attention`` (serialized patch attention on SDPA, with the ``pe`` hook and Pointcept's RPE), ``block``,
``pooling``, ``embedding``, ``network`` (``PointTransformerV3``) and ``segmentor``. Imports only torch.
"""
from pointgeope.model.ptv3.attention import RPE, PatchEncoding, SerializedAttention
from pointgeope.model.ptv3.block import MLP, Block, DropPath
from pointgeope.model.ptv3.embedding import Embedding
from pointgeope.model.ptv3.network import PointTransformerV3
from pointgeope.model.ptv3.patches import PatchPartition, partition
from pointgeope.model.ptv3.pooling import SerializedPooling, SerializedUnpooling
from pointgeope.model.ptv3.segmentor import PTv3Segmentor, pointcept_state_dict
from pointgeope.model.ptv3.serialization import ORDERS, encode
from pointgeope.model.ptv3.sparse_conv import NeighbourTable, SubMConv3d, build_neighbours, subm_conv3d
from pointgeope.model.ptv3.structure import PointBatch

__all__ = [
           "MLP",
           "ORDERS",
           "RPE",
           "Block",
           "DropPath",
           "Embedding",
           "NeighbourTable",
           "PTv3Segmentor",
    "pointcept_state_dict",
           "PatchEncoding",
           "PatchPartition",
           "PointBatch",
           "PointTransformerV3",
           "SerializedAttention",
           "SerializedPooling",
           "SerializedUnpooling",
           "SubMConv3d",
           "build_neighbours",
           "encode",
           "partition",
           "subm_conv3d",
]
