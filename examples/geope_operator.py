"""The GeoPE operator on its own: rotate features by their points' positions, and take keys into a query's
frame (standard and linear GeoPE).

    python examples/geope_operator.py        # prints the shapes and the translation check

docs/GEOPE_SPEC.md shows the code below as its example, and tests/test_docs.py runs this file.
"""
# --8<-- [start:usage]
import torch

from pointgeope.geope import GeoPE

torch.manual_seed(0)
pe = GeoPE(channels=64, axes=3, base=100.0, pos_scale=25.0)   # 25 = 1 / 0.04 m voxels
x, pos = torch.randn(1000, 64), 4.0 * torch.rand(1000, 3)     # features and positions (metres) of 1,000 points
y = pe(x, pos)                                                # R(t(pos)) per block of 3 channels: (1000, 64)

N, k = 1000, 16                                               # each point i and k neighbours j
k_j, pos_j = torch.randn(N, k, 64), 4.0 * torch.rand(N, k, 3)
pos_i = 4.0 * torch.rand(N, 1, 3)
k_rel = pe.relative(k_j, pos_i, pos_j)                        # R(t_i)^T R(t_j) k_j: (1000, 16, 64)
k_lin = pe.relative(k_j, pos_i, pos_j, linear=True)           # R(t_j - t_i) k_j: translation invariant
shift = torch.tensor([10.0, -3.0, 2.5])                       # the same points, 10 m further along x
moved = pe.relative(k_j, pos_i + shift, pos_j + shift, linear=True)
print("rotated:", tuple(y.shape), "relative:", tuple(k_rel.shape))
print("linear GeoPE translation invariant:", torch.allclose(moved, k_lin, atol=1e-3))  # float32 rounding
# --8<-- [end:usage]
