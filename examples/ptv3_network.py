"""Point Transformer V3 (Pointcept's PT-v3m1) in plain torch: a small network with GeoPE in its attention, on a
batch of two clouds, and the full S3DIS network's size.

    python examples/ptv3_network.py        # a few seconds on a CPU; prints the shapes and the parameter count

docs/ptv3.md shows the code below as its example, and tests/test_docs.py runs this file.
"""
# --8<-- [start:usage]
import torch

from pointgeope.model.ptv3 import PointTransformerV3, PTv3Segmentor
from pointgeope.model.qk_encodings import qk_encoding

torch.manual_seed(0)
# two clouds of 300 and 200 points: coordinates in metres, features [rgb / 255 | normal]
coord = torch.cat([3.0 * torch.rand(300, 3), 2.0 * torch.rand(200, 3)])
feat = torch.cat([torch.rand(500, 3), torch.nn.functional.normalize(torch.randn(500, 3), dim=1)], dim=1)
offset = torch.tensor([300, 500])                                     # end of each cloud
grid_size = 0.05
cells = torch.floor(coord / grid_size).long()                         # PTv3's grid: anchored at the origin,
grid_coord = torch.cat([c - c.min(0).values for c in cells.split([300, 200])])  # then shifted to 0 per cloud

# Pointcept's constructor arguments by their names; PointTransformerV3() is its S3DIS network (46M parameters)
pe = qk_encoding("geope", head_dim=18, pos_scale=1 / grid_size)     # every head 18 wide: 36 / 2, 72 / 4
backbone = PointTransformerV3(in_channels=6, stride=(2,), enc_depths=(1, 1), enc_channels=(36, 72),
                              enc_num_head=(2, 4), enc_patch_size=(64, 64), dec_depths=(1,), dec_channels=(36,),
                              dec_num_head=(2,), dec_patch_size=(64,), pe=pe)
model = PTv3Segmentor(num_classes=13, backbone_out_channels=36, backbone=backbone).eval()
with torch.no_grad():
    logits = model(coord, grid_coord, feat, offset)                  # rows in input order
print("logits:", tuple(logits.shape))                                 # (500, 13)
print("S3DIS network:", f"{sum(p.numel() for p in PointTransformerV3().parameters()):,} parameters")
# --8<-- [end:usage]
