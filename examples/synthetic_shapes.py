"""Small synthetic stand-ins for ModelNet10 and ShapeNet, for the PyG Point Transformer examples.

Every shape is sampled on its surface, then put through PyG's own `T.NormalizeScale()` (centred, scaled into
$[-1, 1]^3$ with the largest coordinate at 1), as PyG's examples do with the real datasets:

- `classification_set`: one class per primitive (sphere, box, cylinder, cone, torus, two boxes), random
  proportions and orientation; `Data(pos, y)` with `y (1,)`, no features (PyG's example then uses ones).
- `part_set`: "airplanes" of four parts (fuselage, wings, tail fin, engines) with random proportions;
  `Data(x, pos, y)` with the part label per point in `y (N,)` and `x` = the positions (ShapeNet's `x`
  holds normals: 3 features of the same form).
"""
from __future__ import annotations

import math

import torch
import torch_geometric.transforms as T
from torch import Tensor
from torch_geometric.data import Data

__all__ = ["CLASSES", "PARTS", "classification_set", "part_set"]

CLASSES = ("sphere", "box", "cylinder", "cone", "torus", "two boxes")
PARTS = ("fuselage", "wings", "tail", "engines")


def _sphere(n: int, gen: torch.Generator) -> Tensor:
    v = torch.randn(n, 3, generator=gen)
    return v / v.norm(dim=1, keepdim=True)


def _box(n: int, gen: torch.Generator, size: Tensor) -> Tensor:
    """Uniform on the faces of a box of edge lengths `size (3,)` centred at 0 (faces picked by area)."""
    area = torch.stack([size[1] * size[2], size[0] * size[2], size[0] * size[1]]).repeat(2)
    face = torch.multinomial(area, n, replacement=True, generator=gen)
    p = (torch.rand(n, 3, generator=gen) - 0.5) * size
    axis, sign = face % 3, (face // 3) * 2 - 1.0
    p[torch.arange(n), axis] = sign * size[axis] / 2
    return p


def _cylinder(n: int, gen: torch.Generator, radius: float, length: float, taper: float = 1.0) -> Tensor:
    """The side of a cylinder along x (a cone's when `taper = 0`: radius shrinks linearly to `taper * radius`)."""
    t = torch.rand(n, generator=gen)
    angle = torch.rand(n, generator=gen) * 2 * math.pi
    r = radius * (1 - (1 - taper) * t)
    return torch.stack([(t - 0.5) * length, r * angle.cos(), r * angle.sin()], 1)


def _torus(n: int, gen: torch.Generator, ring: float, tube: float) -> Tensor:
    a, b = (torch.rand(n, generator=gen) * 2 * math.pi for _ in range(2))
    return torch.stack([(ring + tube * b.cos()) * a.cos(), (ring + tube * b.cos()) * a.sin(), tube * b.sin()], 1)


def _rotation(gen: torch.Generator) -> Tensor:
    """A uniformly random 3-D rotation (QR of a Gaussian matrix, signs fixed)."""
    q, r = torch.linalg.qr(torch.randn(3, 3, generator=gen, dtype=torch.float64))
    q = q * torch.sign(torch.diagonal(r))
    return (q if torch.det(q) > 0 else -q).float()


def _primitive(label: int, n: int, gen: torch.Generator) -> Tensor:
    s = 0.5 + torch.rand(3, generator=gen)                                # random proportions
    if label == 0:
        return _sphere(n, gen) * s
    if label == 1:
        return _box(n, gen, s)
    if label in (2, 3):
        return _cylinder(n, gen, float(s[0]) / 2, 1 + float(s[1]), taper=1.0 if label == 2 else 0.0)
    if label == 4:
        return _torus(n, gen, 1.0, 0.2 + 0.2 * float(s[0]))
    half = n // 2
    return torch.cat([_box(half, gen, s) - 0.6, _box(n - half, gen, s.flip(0)) + 0.6])


def classification_set(per_class: int, points: int, seed: int = 0) -> list[Data]:
    """`per_class` shapes of every class in `CLASSES`, `points` points each, normalised by `T.NormalizeScale`."""
    gen, normalise = torch.Generator().manual_seed(seed), T.NormalizeScale()
    shapes = []
    for _ in range(per_class):
        for label in range(len(CLASSES)):
            pos = _primitive(label, points, gen) @ _rotation(gen).T
            shapes.append(normalise(Data(pos=pos, y=torch.tensor([label]))))
    return shapes


def _airplane(points: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """Points and part labels of one airplane (fuselage along x, wings along y, a tail fin along z)."""
    length, span = 3 + torch.rand(1, generator=gen).item(), 2.5 + 1.5 * torch.rand(1, generator=gen).item()
    share = torch.tensor([0.4, 0.3, 0.1, 0.2])
    counts = (share * points).long()
    counts[0] += points - int(counts.sum())
    fuselage = _cylinder(int(counts[0]), gen, 0.3, length, taper=0.6)
    wings = _box(int(counts[1]), gen, torch.tensor([0.6, span, 0.06]))
    tail = _box(int(counts[2]), gen, torch.tensor([0.4, 0.06, 0.8])) + torch.tensor([-length / 2 + 0.2, 0, 0.4])
    engines = _cylinder(int(counts[3]), gen, 0.12, 0.6)
    engines[: len(engines) // 2, 1] += span / 4
    engines[len(engines) // 2:, 1] -= span / 4
    engines[:, 2] -= 0.2
    pos = torch.cat([fuselage, wings, tail, engines])
    return pos, torch.repeat_interleave(torch.arange(4), counts)


def part_set(count: int, points: int, seed: int = 0) -> list[Data]:
    """`count` airplanes of `points` points, part labels in `y`, normalised by `T.NormalizeScale`."""
    gen, normalise = torch.Generator().manual_seed(seed), T.NormalizeScale()
    shapes = []
    for _ in range(count):
        pos, label = _airplane(points, gen)
        data = normalise(Data(pos=pos @ _rotation(gen).T, y=label))
        data.x = data.pos.clone()
        shapes.append(data)
    return shapes
