"""PyG's Point Transformer segmentation example with GeoPE: the layer swapped, on a CPU's scale.

PyG's `examples/point_transformer_segmentation.py` segments ShapeNet's airplanes into parts with a U-Net of
Point Transformer blocks: the classification example's blocks and transitions down, a summit block, then
transitions up (an MLP on the coarse features, interpolated from their 3 nearest coarse points with weights
`1 / d^2`, added to an MLP of the skip features) each followed by a block, and the head
`MLP([C, 64, parts], norm=None)`. This script builds those modules as PyG's does, with the differences of
`pyg_point_transformer_classification.py` (whose parts it imports, as PyG's does: the layer chosen by
`--layers`, `pyg` or a `pe`, `rpe` giving PyG's losses bit for bit; pointgeope's kNN and FPS; widths
`(32, 64, 128)`, `--steps` Adam steps at lr 1e-3 without `StepLR`, training losses and no test split, where
PyG prints the test IoU), and these:

- the interpolation is written with `pointgeope.model.ops.knn` instead of PyG's `knn_interpolate`;
- ShapeNet's airplanes are replaced by synthetic airplanes of four parts (`synthetic_shapes.py`), 16 of 256
  points in batches of 4 (PyG: batches of 10), normalised by `T.NormalizeScale`
  in any orientation, with PyG's training transform (`T.RandomJitter(0.01)` and rotations of up to 15
  degrees about each axis); their 3 input features are the positions (ShapeNet's are the normals).

Each level's `pos_scale` is `1 / spacing` of its points (`level_pos_scale`, see the classification example):
the U-Net's way up reuses the down levels' points, so a block on level `l` has the `pos_scale` of level `l`.

    python examples/pyg_point_transformer_segmentation.py [--layers pyg rpe geope] [--steps 30]
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.nn.functional as F
import torch_geometric.transforms as T
from torch import Tensor, nn
from torch.utils.data import Dataset
from torch_geometric import seed_everything
from torch_geometric.nn import MLP

sys.path.insert(0, str(Path(__file__).resolve().parent))          # the classification example's parts
from pyg_point_transformer_classification import (
    TransformerBlock,
    TransitionDown,
    compare,
    fit,
    level_pos_scale,
    offsets,
    parse_args,
)
from synthetic_shapes import PARTS, part_set

from pointgeope.model.ops import knn
from pointgeope.nn import knn_graph


def knn_interpolate(x: Tensor, pos_x: Tensor, pos_y: Tensor, batch_x: Tensor, batch_y: Tensor, k: int = 3) -> Tensor:
    """Features `x` at `pos_x` carried to `pos_y`: the mean of the `k` nearest, weighted by `1 / d^2` (PyG's
    `knn_interpolate`). An example of `n < k` points at `pos_x` gives all `n`, each once, as PyG's does
    (`pointgeope.model.ops.knn` repeats them to fill the `k` columns: those repeats get no weight)."""
    idx, dist2 = knn(pos_y, pos_x, k, offsets(batch_y), offsets(batch_x))
    sizes = torch.bincount(batch_x, minlength=int(batch_y.max()) + 1)[batch_y]        # n of each y's example
    weight = (1.0 / dist2.clamp_min(1e-16)) * (torch.arange(k, device=idx.device) < sizes.unsqueeze(1))
    return (x[idx] * weight.unsqueeze(-1)).sum(1) / weight.sum(1, keepdim=True)


class TransitionUp(nn.Module):
    """Coarse features through an MLP, interpolated to the fine points, plus an MLP of the fine (skip) ones."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.mlp_sub = MLP([in_channels, out_channels], plain_last=False)
        self.mlp = MLP([out_channels, out_channels], plain_last=False)

    def forward(self, x: Tensor, x_sub: Tensor, pos: Tensor, pos_sub: Tensor, batch: Tensor,
                batch_sub: Tensor) -> Tensor:
        return self.mlp(x) + knn_interpolate(self.mlp_sub(x_sub), pos_sub, pos, batch_sub, batch)


class Net(nn.Module):
    """The U-Net: input block, (down, block) per level, summit block, (up, block) per level, PyG's MLP head
    (`Linear-ReLU-Linear`)."""

    def __init__(self, in_channels: int, num_classes: int, dims: list[int], layer: str, points: int, k: int = 16):
        super().__init__()
        self.k = k
        scales = [level_pos_scale(points, level) for level in range(len(dims))]
        self.mlp_input = MLP([in_channels, dims[0]], plain_last=False)
        self.transformer_input = TransformerBlock(dims[0], dims[0], layer, scales[0])
        self.transition_down, self.transformers_down = nn.ModuleList(), nn.ModuleList()
        self.transition_up, self.transformers_up = nn.ModuleList(), nn.ModuleList()
        for level in range(len(dims) - 1):
            self.transition_down.append(TransitionDown(dims[level], dims[level + 1], k=k))
            self.transformers_down.append(TransformerBlock(dims[level + 1], dims[level + 1], layer, scales[level + 1]))
            self.transition_up.append(TransitionUp(dims[level + 1], dims[level]))
            self.transformers_up.append(TransformerBlock(dims[level], dims[level], layer, scales[level]))
        self.mlp_summit = MLP([dims[-1], dims[-1]], norm=None, plain_last=False)
        self.transformer_summit = TransformerBlock(dims[-1], dims[-1], layer, scales[-1])
        self.head = MLP([dims[0], 64, num_classes], norm=None)

    def forward(self, x: Tensor, pos: Tensor, batch: Tensor) -> Tensor:
        x = self.transformer_input(self.mlp_input(x), pos, knn_graph(pos, self.k, batch))
        levels = [(x, pos, batch)]                                          # the skips, fine to coarse
        for down, block in zip(self.transition_down, self.transformers_down, strict=True):
            x, pos, batch = down(x, pos, batch)
            x = block(x, pos, knn_graph(pos, self.k, batch))
            levels.append((x, pos, batch))
        x = self.transformer_summit(self.mlp_summit(x), pos, knn_graph(pos, self.k, batch))
        for level in reversed(range(len(self.transition_up))):
            (skip, pos, batch), (_, pos_sub, batch_sub) = levels[level], levels[level + 1]
            x = self.transition_up[level](skip, x, pos, pos_sub, batch, batch_sub)
            x = self.transformers_up[level](x, pos, knn_graph(pos, self.k, batch))
        return F.log_softmax(self.head(x), dim=-1)


class Augmented(Dataset):
    """The shapes with PyG's training transform (small random translation and rotations about each axis)."""

    def __init__(self, shapes: list):
        self.shapes = shapes
        self.transform = T.Compose([T.RandomJitter(0.01), T.RandomRotate(15, axis=0), T.RandomRotate(15, axis=1),
                                    T.RandomRotate(15, axis=2)])

    def __len__(self) -> int:
        return len(self.shapes)

    def __getitem__(self, i: int):
        return self.transform(self.shapes[i].clone())


def train(layer: str, shapes: list, steps: int, dims: list[int], points: int, k: int, seed: int = 0,
          lr: float = 1e-3, batch_size: int = 4) -> list[float]:
    """`steps` Adam steps of a fresh `Net` on batches of `batch_size` augmented shapes; the loss of every step."""
    seed_everything(seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = Net(shapes[0].num_features, len(PARTS), dims, layer, points, k).to(device)
    return fit(model, Augmented(shapes), steps, lr, batch_size, device)


def main(layers=("pyg", "rpe", "geope"), steps: int = 30, points: int = 256, count: int = 16, dims=(32, 64, 128),
         k: int = 16, lr: float = 1e-3,
         batch_size: int = 4) -> dict[str, list[float]]:
    shapes = part_set(count, points)
    print(f"{len(shapes)} synthetic airplanes of {points} points, {len(PARTS)} parts")
    return compare(layers, lambda layer: train(layer, shapes, steps, list(dims), points, k, lr=lr,
                                              batch_size=batch_size))


if __name__ == "__main__":
    args = parse_args(__doc__.splitlines()[0], steps=30, min_points=10)  # a tenth: the tail
    main(args.layers, args.steps, args.points)
