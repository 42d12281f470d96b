"""Point Transformer segmentation in PyTorch Geometric with GeoPE: a few training steps on a synthetic room.

The pattern of PyG's ``examples/point_transformer_segmentation.py`` (``Data`` batches from a ``DataLoader``,
``TransformerBlock`` = Linear-ReLU, Point Transformer attention over the kNN graph, Linear-ReLU) with
``pointgeope.nn.GeoPEPointTransformerConv`` in place of ``PointTransformerConv`` and ``pointgeope.nn.knn_graph``
for the neighbours (no torch-cluster or pyg-lib). It trains the same network, from the same initial weights,
once with ``pe="rpe"`` (PyG's layer) and once with ``pe="geope"``, on one room of ``pointgeope synth``
(sampled in memory by the generator, without files or the toolkit's parser: ``pip install ".[nn]"`` runs it)::

    python examples/pyg_point_transformer.py [--steps 40]
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.data import Data
from torch_geometric.loader import DataLoader
from torch_geometric.nn import MLP

from data_prep.synth.dataset import synth_room
from pointgeope.constants import NUM_CLASSES
from pointgeope.nn import GeoPEPointTransformerConv, knn_graph

SPACING = 0.2       # metres between the points of a `synth --size tiny` room (25 points per m^2)


def room_blocks() -> list[Data]:
    """One synthetic office (``Area_1/office_1`` of ``pointgeope synth --size tiny``, its points as the
    generator samples them, before they are written as text) cut into 2 x 2 blocks: ``x = [rgb / 255 | xyz]``,
    ``pos`` in metres, ``y`` the class of each point's annotation file."""
    points = synth_room("tiny", 1, 0)
    coord = torch.from_numpy(points.coord())
    color = torch.from_numpy(points.rgb).float() / 255
    label = torch.from_numpy(points.labels())
    middle = (coord.min(0).values + coord.max(0).values) / 2
    blocks = []
    for quarter in range(4):
        keep = ((coord[:, 0] > middle[0]) == bool(quarter & 1)) & ((coord[:, 1] > middle[1]) == bool(quarter & 2))
        pos = coord[keep] - coord[keep].min(0).values
        blocks.append(Data(x=torch.cat([color[keep], pos], 1), pos=pos, y=label[keep]))
    return blocks


class TransformerBlock(nn.Module):
    """PyG's example block: ``Linear-ReLU``, the attention, ``Linear-ReLU``."""

    def __init__(self, channels: int, pe: str):
        super().__init__()
        self.lin_in, self.lin_out = nn.Linear(channels, channels), nn.Linear(channels, channels)
        scale = {} if pe == "rpe" else {"pos_scale": 1 / SPACING}          # rpe reads no scale (and refuses one)
        self.conv = GeoPEPointTransformerConv(
            channels, channels, pos_nn=MLP([3, 32, channels], norm=None, plain_last=False),
            attn_nn=MLP([channels, 32, channels], norm=None, plain_last=False), pe=pe, **scale)

    def forward(self, x, pos, edge_index):
        return self.lin_out(self.conv(self.lin_in(x).relu(), pos, edge_index)).relu()


class Net(nn.Module):
    def __init__(self, in_channels: int, num_classes: int, pe: str, channels: int = 32, depth: int = 2, k: int = 8):
        super().__init__()
        self.k = k
        self.mlp_input = MLP([in_channels, channels])
        self.blocks = nn.ModuleList(TransformerBlock(channels, pe) for _ in range(depth))
        self.mlp_output = MLP([channels, 64, num_classes], norm=None)

    def forward(self, x, pos, batch):
        edge_index = knn_graph(pos, self.k, batch)          # pointgeope's kNN, within each example
        x = self.mlp_input(x)
        for block in self.blocks:
            x = block(x, pos, edge_index)
        return self.mlp_output(x)


def train(blocks: list[Data], pe: str, steps: int, seed: int = 0) -> list[float]:
    """``steps`` Adam steps on batches of two blocks; the loss of every step."""
    torch.manual_seed(seed)                                  # the same weights and batches for every pe
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = Net(blocks[0].num_features, NUM_CLASSES, pe).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    losses = []
    while len(losses) < steps:
        for data in DataLoader(blocks, batch_size=2, shuffle=True):
            data = data.to(device)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(data.x, data.pos, data.batch), data.y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if len(losses) == steps:
                break
    return losses


def main(steps: int = 40) -> dict[str, list[float]]:
    blocks = room_blocks()
    print(f"one synthetic office: {sum(b.num_nodes for b in blocks)} points in {len(blocks)} blocks")
    results = {}
    for pe in ("rpe", "geope"):
        results[pe] = train(blocks, pe, steps)
        at = sorted({0, steps // 4, steps // 2, steps - 1})
        shown = ", ".join(f"{results[pe][i]:.3f}" for i in at)
        print(f"pe={pe:<6} loss at steps {', '.join(str(i + 1) for i in at)}: {shown}")
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="training steps per positional encoding (>= 1)")
    args = parser.parse_args()
    if args.steps < 1:                                       # argparse's one line and exit code 2
        parser.error(f"argument --steps: expected an int >= 1, got {args.steps}")
    main(args.steps)
