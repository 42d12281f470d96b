"""Point Transformer (Zhao et al. 2021) for segmentation, written out from its definition in plain torch, to
check ``PointTransformerSeg(pe="rpe")`` against: brute-force farthest point sampling and kNN per cloud, every
layer a functional call on the parameters of the module under test (read by name, so no code of it runs).

The definition (the paper, Sec. 3, and the authors' S3DIS model ``pointtransformer_seg_repro``):

- stage 0: ``Linear-BN-ReLU`` of the input features; stage ``s > 0``: ``n // stride`` points per cloud by
  farthest point sampling from the cloud's first point, each taking the max over its ``k`` nearest points of
  the previous stage of ``Linear-BN-ReLU([p_j - p_i | x_j])``;
- a block: ``relu(x + BN(Linear(relu(BN(attn(p, relu(BN(Linear(x)))))))))``;
- attention over the ``k`` nearest points ``j`` of ``i`` (``i`` included), ``C`` channels in ``s`` groups:
  ``delta_ij = Linear(relu(BN(Linear(p_j - p_i))))``, ``w_ij = gamma(k_j - q_i + delta_ij)`` with
  ``gamma = Linear(relu(BN(Linear(relu(BN(.))))))`` (``C -> C / s``), softmax over ``j``, and
  ``y_i[g C/s + h] = sum_j softmax(w_i)_j[h] (v_j + delta_ij)[g C/s + h]``;
- decoder: at the coarsest stage ``Linear-BN-ReLU([x | Linear-ReLU(mean of the cloud's x)])``; elsewhere
  ``Linear-BN-ReLU(skip) + sum_{3 nearest coarse c} w_c Linear-BN-ReLU(x_c)`` with ``w_c`` proportional to
  ``1 / (d_c + 1e-8)``; then the stage's blocks; head ``Linear-BN-ReLU-Linear``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def _clouds(offset: list[int]) -> list[tuple[int, int]]:
    return list(zip([0] + offset[:-1], offset, strict=False))


def farthest_points(p: torch.Tensor, offset: list[int], stride: int) -> tuple[torch.Tensor, list[int]]:
    """Rows of ``p`` chosen per cloud, ``n // stride`` of each, from its first point; the new offsets."""
    rows, new = [], []
    for s, e in _clouds(offset):
        d = torch.full((e - s,), float("inf"), dtype=p.dtype)
        pick = [0]
        for _ in range(1, (e - s) // stride):
            d = torch.minimum(d, ((p[s:e] - p[s + pick[-1]]) ** 2).sum(1))
            pick.append(int(torch.argmax(d)))
        rows.append(torch.tensor(pick) + s)
        new.append((new[-1] if new else 0) + len(pick))
    return torch.cat(rows), new


def nearest(p: torch.Tensor, offset: list[int], q: torch.Tensor, q_offset: list[int], k: int):
    """The ``k`` nearest rows of ``p`` (same cloud) of every row of ``q``, and their distances."""
    idx, dist = [], []
    for (s, e), (qs, qe) in zip(_clouds(offset), _clouds(q_offset), strict=True):
        d2 = ((q[qs:qe, None, :] - p[None, s:e, :]) ** 2).sum(-1)
        v, i = torch.topk(d2, k, dim=1, largest=False)
        idx.append(i + s)
        dist.append(v.sqrt())
    return torch.cat(idx), torch.cat(dist)


class Reference:
    """The network's forward from the parameters ``sd`` (a state dict of ``PointTransformerSeg``), in eval
    mode (running statistics) or train mode (batch statistics)."""

    def __init__(self, sd: dict, strides, neighbours, share_planes: int, train: bool):
        self.sd, self.strides, self.k, self.s, self.train = sd, strides, neighbours, share_planes, train

    def lin(self, name, x):
        return F.linear(x, self.sd[name + ".weight"], self.sd.get(name + ".bias"))

    def bn(self, name, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        sd = self.sd
        y = F.batch_norm(x, sd[name + ".running_mean"].clone(), sd[name + ".running_var"].clone(),
                         sd[name + ".weight"], sd[name + ".bias"], self.train, 0.1, 1e-5)
        return y.reshape(shape)

    def lbr(self, lin, bn, x):
        return F.relu(self.bn(bn, self.lin(lin, x)))

    def attention(self, a, p, x, idx):
        q, kf, v = self.lin(a + ".linear_q", x), self.lin(a + ".linear_k", x), self.lin(a + ".linear_v", x)
        delta = self.lin(a + ".linear_p.3", self.lbr(a + ".linear_p.0", a + ".linear_p.1", p[idx] - p[:, None]))
        w = F.relu(self.bn(a + ".linear_w.0", kf[idx] - q[:, None] + delta))
        w = self.lin(a + ".linear_w.5", F.relu(self.bn(a + ".linear_w.3", self.lin(a + ".linear_w.2", w))))
        w = torch.softmax(w, dim=1)                                                  # (N, k, C / s)
        n, k, c = delta.shape
        value = (v[idx] + delta).view(n, k, self.s, c // self.s)
        return (value * w[:, :, None, :]).sum(1).reshape(n, c)

    def block(self, b, p, x, idx):
        y = self.lbr(b + ".linear1", b + ".bn1", x)
        y = F.relu(self.bn(b + ".bn2", self.attention(b + ".attention", p, y, idx)))
        return F.relu(x + self.bn(b + ".bn3", self.lin(b + ".linear3", y)))

    def blocks(self, prefix, s, p, offset, x):
        idx = None
        for b in sorted({key.split(".")[2] for key in self.sd if key.startswith(f"{prefix}.{s}.")}, key=int):
            idx = nearest(p, offset, p, offset, self.k[s])[0] if idx is None else idx
            x = self.block(f"{prefix}.{s}.{b}", p, x, idx)
        return x

    def __call__(self, coord, feat, offset: list[int]):
        points, offsets, skips, x, p = [], [], [], feat, coord
        for s, stride in enumerate(self.strides):
            if stride == 1:
                x = self.lbr(f"down.{s}.linear", f"down.{s}.bn", x)
            else:
                rows, new = farthest_points(p, offset, stride)
                idx = nearest(p, offset, p[rows], new, self.k[s])[0]
                grouped = torch.cat([p[idx] - p[rows][:, None], x[idx]], dim=-1)
                x = self.lbr(f"down.{s}.linear", f"down.{s}.bn", grouped).max(dim=1).values
                p, offset = p[rows], new
            x = self.blocks("encoder", s, p, offset, x)
            points.append(p), offsets.append(offset), skips.append(x)
        last = len(skips) - 1
        for s in reversed(range(len(skips))):
            p, offset = points[s], offsets[s]
            if s == last:
                means = torch.cat([skips[s][a:b].mean(0, keepdim=True).expand(b - a, -1) for a, b in _clouds(offset)])
                glob = F.relu(self.lin(f"up.{s}.linear2.0", means))
                x = self.lbr(f"up.{s}.linear1.0", f"up.{s}.linear1.1", torch.cat([skips[s], glob], 1))
            else:
                coarse = self.lbr(f"up.{s}.linear2.0", f"up.{s}.linear2.1", x)
                idx, d = nearest(points[s + 1], offsets[s + 1], p, offset, 3)
                w = 1.0 / (d + 1e-8)
                w = w / w.sum(1, keepdim=True)
                x = self.lbr(f"up.{s}.linear1.0", f"up.{s}.linear1.1", skips[s]) + (coarse[idx] * w[..., None]).sum(1)
            x = self.blocks("decoder", s, p, offset, x)
        return self.lin("head.3", self.lbr("head.0", "head.1", x))
