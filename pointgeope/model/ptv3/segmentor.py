"""PTv3 with its segmentation head, as Pointcept's ``DefaultSegmentorV2``: ``logits = seg_head(backbone(x))``.

Parameter names ``backbone.*`` and ``seg_head.*`` are Pointcept's, so a whole Pointcept segmentor checkpoint
(its ``state_dict`` without the ``module.`` prefix of DDP) loads with ``strict=True``. The loss is the
engine's, not the model's.
"""
from __future__ import annotations

import os
import pickle
import re

import torch
from torch import Tensor, nn

from pointgeope.model.ptv3.network import PointTransformerV3
from pointgeope.zip_crc import changed_part

__all__ = ["PTv3Segmentor", "pointcept_state_dict"]


def pointcept_state_dict(checkpoint: dict | str | os.PathLike) -> dict:
    """The ``state_dict`` of a Pointcept checkpoint (the file's dict, or its ``"state_dict"`` entry; or the
    file's path) with the ``module.`` prefix of DDP removed:
    ``PTv3Segmentor.load_state_dict(pointcept_state_dict(path))``.

    A path is read on the CPU with ``torch.load(weights_only=True)``, numpy's scalars and dtypes allowed:
    Pointcept's trainer saves its ``best_metric_value`` as a numpy float (the mean IoU), which a plain
    ``torch.load`` (``weights_only`` by default since torch 2.6) refuses; nothing else is unpickled. A file
    holding other objects (an ``OneCycleLR`` state saved under torch < 2.4 holds a bound method) is a
    ``ValueError`` of one line: load a file you trust yourself, ``torch.load(path, weights_only=False)``, and
    pass the dict.
    A file whose bytes changed after it was written (a part that does not match its CRC-32,
    :func:`pointgeope.zip_crc.changed_part`) is a ``ValueError`` of one line too.
    """
    if isinstance(checkpoint, (str, os.PathLike)):
        checkpoint = _load_safely(checkpoint)
    state = checkpoint.get("state_dict", checkpoint) if isinstance(checkpoint, dict) else None
    if not isinstance(state, dict) or not state:
        raise ValueError("expected a Pointcept checkpoint: a dict with a non-empty 'state_dict' (or a state_dict)")
    return {(k[len("module."):] if k.startswith("module.") else k): v for k, v in state.items()}


def _load_safely(path: str | os.PathLike):
    """``torch.load(path, weights_only=True)`` on the CPU with numpy's scalar and dtype classes allowed."""
    import numpy as np

    core = getattr(np, "_core", None) or np.core          # numpy 2 / numpy 1
    dtypes = {type(np.dtype(t)) for t in ("float16", "float32", "float64", "int32", "int64", "bool")}
    with torch.serialization.safe_globals([core.multiarray.scalar, np.dtype, *dtypes]):
        try:
            loaded = torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError as err:              # torch's is many lines: keep the object it names
            found = re.search(r"Unsupported global: GLOBAL (\S+)", str(err))
            what = f"the global {found.group(1)}" if found else "objects"
            raise ValueError(f"{path}: holds more than tensors and numbers ({what}), which a safe load does not "
                             "run; if you trust the file, pass torch.load(path, weights_only=False) to "
                             "pointcept_state_dict instead of its path") from None
    if (part := changed_part(path)) is not None:     # torch.load reads a flipped bit as another weight
        raise ValueError(f"{path}: its part {part} does not match the CRC-32 saved with it: its bytes changed "
                         "after it was written; copy the file again from where it was written")
    return loaded


class PTv3Segmentor(nn.Module):
    """``seg_head = Linear(backbone_out_channels, num_classes)`` (Identity if ``num_classes == 0``) on the
    backbone's per-point features. forward(coord, grid_coord, feat, offset) -> logits (N, num_classes)."""

    def __init__(self, num_classes: int, backbone_out_channels: int, backbone: PointTransformerV3) -> None:
        super().__init__()
        if backbone.out_channels != backbone_out_channels:
            raise ValueError(f"expected backbone_out_channels = {backbone.out_channels} (the backbone's "
                             f"output width), got {backbone_out_channels}")
        self.backbone = backbone
        self.seg_head = nn.Linear(backbone_out_channels, num_classes) if num_classes > 0 else nn.Identity()

    def forward(self, coord: Tensor, grid_coord: Tensor, feat: Tensor, offset: Tensor) -> Tensor:
        return self.seg_head(self.backbone(coord, grid_coord, feat, offset))
