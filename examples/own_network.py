"""GeoPE in your own network: PyTorch Geometric's Point Transformer layer with GeoPE on a batch of two clouds,
and GeoPE in a plain dot-product attention over windows of points.

    python examples/own_network.py        # a few seconds on a CPU; prints the shapes

docs/own-network.md shows the code below as its example, and tests/test_docs.py runs this file.
"""
# --8<-- [start:usage]
import torch
from torch_geometric.data import Batch, Data

from pointgeope.nn import GeoPEPointTransformerConv, geope_attention, knn_graph

torch.manual_seed(0)
# two clouds of 1,000 and 600 points: positions in metres, 6 features a point (colour, normal, ...)
data = Batch.from_data_list([Data(pos=4.0 * torch.rand(n, 3), x=torch.rand(n, 6)) for n in (1000, 600)])

conv = GeoPEPointTransformerConv(6, 64, pe="geope", pos_scale=25.0)  # any preset; pos_scale: see below
edge_index = knn_graph(data.pos, k=16, batch=data.batch)             # pointgeope's kNN: no torch-cluster/pyg-lib
out = conv(data.x, data.pos, edge_index)                             # bipartite (x, pos) pairs too, as in PyG
print("layer:", tuple(out.shape))                                    # (1600, 64)

# any dot-product attention: B windows of L points, H heads of C channels (GeoPE turns blocks of 3 channels)
B, H, L, C = 2, 4, 128, 48
q, k, v = torch.randn(B, H, L, C), torch.randn(B, H, L, C), torch.randn(B, H, L, C)
pos = 2.0 * torch.rand(B, L, 3)                                      # the windows' points, in metres
mask = (torch.arange(L) < torch.tensor([[L], [100]]))[:, None, None, :]  # window 2: 100 points, then padding
y = geope_attention(q, k, v, pos[:, None], attn_mask=mask)           # q, k, v (B, H, L, C), pos (B, 1, L, 3)
print("attention:", tuple(y.shape))                                  # (2, 4, 128, 48)
# --8<-- [end:usage]
