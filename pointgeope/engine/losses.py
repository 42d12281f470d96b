"""The training loss: cross entropy, plus the Lovász-softmax loss in Pointcept's PTv3 recipe.

``train.loss: ce`` (PTv1) is ``F.cross_entropy(logits, y, ignore_index)``. ``train.loss: ce_lovasz``
(Pointcept's S3DIS PTv3 config: ``CrossEntropyLoss`` and ``LovaszLoss(mode="multiclass")``, both of weight
1 and ``ignore_index=-1``) adds ``train.lovasz_weight`` times the Lovász-softmax loss of Berman et al.,
"The Lovász-Softmax loss" (CVPR 2018, https://arxiv.org/abs/1705.08790), over the whole batch at once.

Lovász-softmax. Over the ``P`` points whose label is not ignored, with ``p = softmax(logits)``
``(P, C)``, for each class ``c`` present among the labels: the errors ``m_i = |[y_i = c] - p_ic|`` are
sorted in decreasing order ``m_(1) >= ... >= m_(P)`` (``pi`` the permutation), and

    loss_c = sum_k m_(k) (J_k - J_{k-1}),     J_k = 1 - |F \\ S_k| / |F u S_k|,   J_0 = 0

with ``F`` the points of class ``c`` and ``S_k = {pi(1) .. pi(k)}`` the ``k`` largest errors: the Lovász
extension of the Jaccard loss ``Delta(M) = |M| / |F u M|`` of a set ``M`` of mispredicted points, at
``m``. The loss is the mean of ``loss_c`` over the present classes (0, with a zero gradient, when every
label is ignored). On a one-hot ``p`` it is the mean over the present classes of ``1 - IoU_c``.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def jaccard_steps(fg_sorted: torch.Tensor) -> torch.Tensor:
    """``J_k - J_{k-1}`` (``k = 1..P``) for the foreground indicator ``fg_sorted`` ``(P,)`` in the order of
    decreasing error: ``J_k = 1 - (|F| - #fg in the first k) / (|F| + #bg in the first k)``."""
    fg = fg_sorted if fg_sorted.is_floating_point() else fg_sorted.float()
    total = fg.sum()
    intersection = total - fg.cumsum(0)
    union = total + (1.0 - fg).cumsum(0)
    jaccard = 1.0 - intersection / union
    return torch.cat([jaccard[:1], jaccard[1:] - jaccard[:-1]])


def lovasz_softmax(probs: torch.Tensor, target: torch.Tensor, ignore_index: int | None = None) -> torch.Tensor:
    """The Lovász-softmax loss (module docstring).

    Args:
        probs: ``(N, C)`` class probabilities (rows of a softmax).
        target: ``(N,)`` int64 labels in ``0..C-1``, or ``ignore_index``.
        ignore_index: the label of points left out.

    Returns:
        scalar: the mean over the classes present in ``target`` of the Lovász extension of their Jaccard loss.
    """
    if probs.dim() != 2 or target.shape != probs.shape[:1]:
        raise ValueError(f"expected probs (N, C) and target (N,), got {tuple(probs.shape)} and {tuple(target.shape)}")
    if ignore_index is not None:
        keep = target != ignore_index
        probs, target = probs[keep], target[keep]
    if target.numel() == 0:
        return probs.sum() * 0.0
    losses = []
    for c in torch.unique(target):
        fg = (target == c).to(probs.dtype)
        errors = (fg - probs[:, c]).abs()
        errors_sorted, perm = torch.sort(errors, descending=True)
        losses.append(torch.dot(errors_sorted, jaccard_steps(fg[perm])))
    return torch.stack(losses).mean()


def segmentation_loss(logits: torch.Tensor, target: torch.Tensor, kind: str = "ce", ignore_index: int = -100,
                      lovasz_weight: float = 1.0) -> torch.Tensor:
    """``train.loss`` of ``logits (N, C)`` against ``target (N,)``: ``"ce"`` the cross entropy (mean over the
    points not ignored), ``"ce_lovasz"`` that plus ``lovasz_weight * lovasz_softmax(softmax(logits))``."""
    loss = F.cross_entropy(logits, target, ignore_index=ignore_index)
    if kind == "ce":
        return loss
    if kind == "ce_lovasz":
        return loss + lovasz_weight * lovasz_softmax(torch.softmax(logits, dim=1), target, ignore_index)
    raise ValueError(f"expected train.loss 'ce' or 'ce_lovasz', got {kind!r}")
