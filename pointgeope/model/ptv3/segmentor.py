"""PTv3 with its segmentation head, as Pointcept's ``DefaultSegmentorV2``: ``logits = seg_head(backbone(x))``.

Parameter names ``backbone.*`` and ``seg_head.*`` are Pointcept's, so a whole Pointcept segmentor checkpoint
(its ``state_dict`` without the ``module.`` prefix of DDP) loads with ``strict=True``. The loss is the
engine's, not the model's.
"""
from __future__ import annotations

from torch import Tensor, nn

from pointgeope.model.ptv3.network import PointTransformerV3

__all__ = ["PTv3Segmentor", "pointcept_state_dict"]


def pointcept_state_dict(checkpoint: dict) -> dict:
    """The ``state_dict`` of a Pointcept checkpoint (the file's dict, or its ``"state_dict"`` entry) with the
    ``module.`` prefix of DDP removed: ``PTv3Segmentor.load_state_dict(pointcept_state_dict(torch.load(f)))``.
    """
    state = checkpoint.get("state_dict", checkpoint)
    if not isinstance(state, dict) or not state:
        raise ValueError("expected a Pointcept checkpoint: a dict with a non-empty 'state_dict' (or a state_dict)")
    return {(k[len("module."):] if k.startswith("module.") else k): v for k, v in state.items()}


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
