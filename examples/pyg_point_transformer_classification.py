"""PyG's Point Transformer classification example with GeoPE: the layer swapped, on a CPU's scale.

PyG's `examples/point_transformer_classification.py` trains on ModelNet10 a network of Point Transformer blocks
(`Linear-ReLU`, `PointTransformerConv` over the kNN graph, `Linear-ReLU`; its `pos_nn` and `attn_nn` are
`MLP([., 64, C], norm=None, plain_last=False)`: `Linear-ReLU-Linear-ReLU`) and transition-down steps (farthest
point sampling to a quarter, an MLP, a max over each sample's k nearest points), then a mean pool and the head
`MLP([C, 64, classes], norm=None)`. This script builds those modules as PyG's does. What differs, and why:

- the layer is chosen by `--layers`: `pyg` (PyG's `PointTransformerConv`) or a `pe` of
  [`GeoPEPointTransformerConv`][pointgeope.nn.GeoPEPointTransformerConv] (`rpe` is PyG's layer: the same
  losses, bit for bit, from the same seed), each block with its level's `pos_scale` (below);
- PyG's `knn_graph`, `knn` and `fps` (pyg-lib / torch-cluster) are pointgeope's (`pointgeope.nn.knn_graph`,
  `pointgeope.model.ops.knn` / `fps`: nothing to compile) and the scatter-max a max over the neighbours.
  pointgeope's FPS starts from each example's first point and keeps `max(1, n // 4)` of its `n` points
  (PyG's `fps` starts from a random one, `random_start=True`, and torch-cluster's keeps `ceil(n / 4)`);
- ModelNet10 is replaced by small synthetic shapes of the same form (`synthetic_shapes.py`: six primitives,
  centred and scaled into $[-1, 1]^3$ by PyG's `T.NormalizeScale`, no features), each sampled once (PyG's
  `T.SamplePoints(1024)` samples the meshes afresh every epoch);
- it is small enough for a CPU in a minute: 256 points, widths `(32, 64, 128)` (PyG: 1024 points,
  `[32, 64, 128, 256, 512]`), batches of 8 (PyG: 32), `--steps` Adam steps at PyG's lr 1e-3 without PyG's
  `StepLR` (halving every 20 epochs, which a run of 40 steps never reaches) and without a test split: it
  prints training losses to compare the layers (PyG: each epoch's loss and the test accuracy).

**`pos_scale` on normalised shapes.** GeoPE's block 0 turns by `pos_scale / 3` radians per unit of position,
so `pos_scale = 1 / spacing` (the distance between neighbouring points) turns neighbours by about a third of
a radian, as `1 / voxel size` does on rooms. A shape scaled into $[-1, 1]^3$ (`T.NormalizeScale`) with `n` points on
its surface (an area of about 4 to 8) has a spacing of about `2 / sqrt(n)`; every transition down keeps a quarter of the
points, doubling the spacing, so each level gets its own `pos_scale` (`level_pos_scale`): one value for all
levels would turn the deepest level's neighbours 16 times as far as the first's at five levels.

    python examples/pyg_point_transformer_classification.py [--layers pyg rpe geope] [--steps 40]
"""
from __future__ import annotations

import argparse
import copy
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric import seed_everything
from torch_geometric.loader import DataLoader
from torch_geometric.nn import MLP, PointTransformerConv, global_mean_pool

sys.path.insert(0, str(Path(__file__).resolve().parent))          # synthetic_shapes.py, next to this file
from synthetic_shapes import CLASSES, classification_set

from pointgeope.model import PRESETS, PositionalEncoding
from pointgeope.model.attention import options_for
from pointgeope.model.ops import fps, knn
from pointgeope.nn import GeoPEPointTransformerConv, knn_graph


def level_pos_scale(points: int, level: int, ratio: float = 0.25) -> float:
    """`1 / spacing` at hierarchy `level` of `T.NormalizeScale`d shapes of `points` points: spacing about
    `2 / sqrt(n)` with `n = points * ratio ** level` points left at that level."""
    return math.sqrt(points * ratio ** level) / 2


def make_conv(layer: str, in_channels: int, out_channels: int, pos_nn: nn.Module, attn_nn: nn.Module,
              pos_scale: float) -> nn.Module:
    """PyG's layer (`layer == "pyg"`) or GeoPE's with `pe=layer`: its `pos_nn` only where the preset has a
    delta term, and only the scale the preset reads (a preset refuses the others): PointROPE's `grid_unit` (a
    cell a spacing), the others' `pos_scale`, neither for `rpe` and `none`.

    Every layer leaves the random stream where PyG's leaves it, so that from one seed all get the same other
    weights and the same batches: GeoPE's layer is built in a fork of the stream (RoPE-Mixed draws its
    frequencies after the weights, `none` builds no `pos_nn`), then PyG's draws are made on it, with copies of
    `pos_nn` and `attn_nn` made in a fork too (PyG 2.5's `Linear` draws new weights when it is copied)."""
    if layer == "pyg":
        return PointTransformerConv(in_channels, out_channels, pos_nn=pos_nn, attn_nn=attn_nn)
    encoding, scale = PositionalEncoding.preset(layer), options_for(layer, pos_scale=pos_scale, grid_unit=1 / pos_scale)
    with torch.random.fork_rng(devices=[]):                    # built on the CPU: its stream only
        copies = copy.deepcopy(pos_nn), copy.deepcopy(attn_nn)
    with torch.random.fork_rng(devices=[]):
        conv = GeoPEPointTransformerConv(in_channels, out_channels, pos_nn=pos_nn if encoding.needs_delta else None,
                                         attn_nn=attn_nn, pe=layer, **scale)
    PointTransformerConv(in_channels, out_channels, *copies)   # PyG's draws
    return conv


class TransformerBlock(nn.Module):
    """`Linear-ReLU`, the Point Transformer layer, `Linear-ReLU` (PyG's block, without a skip), with PyG's
    `pos_nn` and `attn_nn` (`Linear-ReLU-Linear-ReLU` of 64 hidden channels)."""

    def __init__(self, in_channels: int, out_channels: int, layer: str, pos_scale: float):
        super().__init__()
        self.lin_in, self.lin_out = nn.Linear(in_channels, in_channels), nn.Linear(out_channels, out_channels)
        pos_nn = MLP([3, 64, out_channels], norm=None, plain_last=False)
        attn_nn = MLP([out_channels, 64, out_channels], norm=None, plain_last=False)
        self.transformer = make_conv(layer, in_channels, out_channels, pos_nn, attn_nn, pos_scale)

    def forward(self, x: Tensor, pos: Tensor, edge_index: Tensor) -> Tensor:
        return self.lin_out(self.transformer(self.lin_in(x).relu(), pos, edge_index)).relu()


def offsets(batch: Tensor) -> Tensor:
    """Cumulative point counts of a sorted batch vector (pointgeope's ops take offsets)."""
    return torch.bincount(batch).cumsum(0)


class TransitionDown(nn.Module):
    """Farthest point sampling to `ratio` of every example, an MLP, then the max over the `k` nearest points
    of each sample."""

    def __init__(self, in_channels: int, out_channels: int, ratio: float = 0.25, k: int = 16):
        super().__init__()
        self.stride, self.k = round(1 / ratio), k
        self.mlp = MLP([in_channels, out_channels], plain_last=False)

    def forward(self, x: Tensor, pos: Tensor, batch: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        offset = offsets(batch)
        sample, sub_offset = fps(pos, offset, self.stride)
        neighbours, _ = knn(pos[sample], pos, self.k, sub_offset, offset)      # (M, k) rows of pos
        return self.mlp(x)[neighbours].amax(dim=1), pos[sample], batch[sample]


class Net(nn.Module):
    """Input MLP and block, then (transition down, block) per level, mean pool, PyG's MLP head
    (`Linear-ReLU-Linear`)."""

    def __init__(self, num_classes: int, num_features: int, dims: list[int], layer: str, points: int, k: int = 16):
        super().__init__()
        self.k = k
        self.mlp_input = MLP([max(num_features, 1), dims[0]], plain_last=False)
        self.transformer_input = TransformerBlock(dims[0], dims[0], layer, level_pos_scale(points, 0))
        self.transition_down, self.transformers_down = nn.ModuleList(), nn.ModuleList()
        for level in range(1, len(dims)):
            self.transition_down.append(TransitionDown(dims[level - 1], dims[level], k=k))
            self.transformers_down.append(TransformerBlock(dims[level], dims[level], layer,
                                                           level_pos_scale(points, level)))
        self.head = MLP([dims[-1], 64, num_classes], norm=None)

    def forward(self, x: Tensor | None, pos: Tensor, batch: Tensor) -> Tensor:
        x = pos.new_ones(pos.shape[0], 1) if x is None else x                 # no features: ones, as PyG's
        x = self.transformer_input(self.mlp_input(x), pos, knn_graph(pos, self.k, batch))
        for down, block in zip(self.transition_down, self.transformers_down, strict=True):
            x, pos, batch = down(x, pos, batch)
            x = block(x, pos, knn_graph(pos, self.k, batch))
        return F.log_softmax(self.head(global_mean_pool(x, batch)), dim=-1)


def train(layer: str, shapes: list, steps: int, dims: list[int], points: int, k: int, seed: int = 0,
          lr: float = 1e-3, batch_size: int = 8) -> list[float]:
    """`steps` Adam steps (PyG uses lr 1e-3) of a fresh `Net` on batches of `batch_size` shapes; every step's loss."""
    seed_everything(seed)                                                  # the same weights and batches
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = Net(len(CLASSES), 0, dims, layer, points, k).to(device)
    return fit(model, shapes, steps, lr, batch_size, device)


def fit(model: nn.Module, dataset, steps: int, lr: float, batch_size: int, device: torch.device) -> list[float]:
    """`steps` Adam steps of `model` (log-probabilities out, NLL loss as PyG's examples) on shuffled batches of
    `dataset`, as many passes as it takes; the loss of every step. Both examples train through it."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    while len(losses) < steps:
        for data in DataLoader(dataset, batch_size=batch_size, shuffle=True):
            data = data.to(device)
            optimizer.zero_grad()
            loss = F.nll_loss(model(data.x, data.pos, data.batch), data.y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if len(losses) == steps:
                break
    return losses


def compare(layers, train_one) -> dict[str, list[float]]:
    """`train_one(layer)` for every layer, printing its losses at the first, middle and last step."""
    results = {}
    for layer in layers:
        results[layer] = losses = train_one(layer)
        at = sorted({0, len(losses) // 2, len(losses) - 1})
        print(f"{layer:<8} loss at steps {', '.join(str(i + 1) for i in at)}: "
              f"{', '.join(f'{losses[i]:.4f}' for i in at)}")
    return results


def main(layers=("pyg", "rpe", "geope"), steps: int = 40, points: int = 256, per_class: int = 8,
         dims=(32, 64, 128), k: int = 16, lr: float = 1e-3,
         batch_size: int = 8) -> dict[str, list[float]]:
    shapes = classification_set(per_class, points)
    print(f"{len(shapes)} synthetic shapes of {points} points, {len(CLASSES)} classes")
    return compare(layers, lambda layer: train(layer, shapes, steps, list(dims), points, k, lr=lr,
                                              batch_size=batch_size))


def at_least(minimum: int):
    """An argparse type: an int >= `minimum` (argparse turns the errors into one line and exit code 2)."""
    def parse(text: str) -> int:
        value = int(text)
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected an int >= {minimum}, got {value}")
        return value
    parse.__name__ = "int"                                             # argparse's "invalid int value: 'x'"
    return parse


def parse_args(description: str, steps: int, min_points: int) -> argparse.Namespace:
    """Both examples' command line: `--layers` (`pyg` or presets, checked before any work), `--steps` (>= 1) and
    `--points` (>= `min_points`, the fewest their synthetic shapes are made of)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--layers", nargs="+", default=["pyg", "rpe", "geope"], choices=["pyg", *PRESETS],
                        metavar="LAYER", help="'pyg' (PyG's PointTransformerConv) or presets of "
                                              "GeoPEPointTransformerConv: %(choices)s")
    parser.add_argument("--steps", type=at_least(1), default=steps, help="training steps per layer")
    parser.add_argument("--points", type=at_least(min_points), default=256, help="points per shape")
    return parser.parse_args()


if __name__ == "__main__":
    args = parse_args(__doc__.splitlines()[0], steps=40, min_points=2)   # two boxes: 1 + 1
    main(args.layers, args.steps, args.points)
