"""The Lovász-softmax loss against its definition: the Lovász extension of the Jaccard loss computed here by
level sets (an integral over thresholds of set functions on Python sets), and 1 - IoU on hard predictions."""
from __future__ import annotations

import re
from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from pointgeope.engine.losses import lovasz_softmax, segmentation_loss


def jaccard_loss(mispredicted: set[int], fg: set[int]) -> Fraction:
    """Delta(M) = |M| / |F u M| (0 for the empty set)."""
    union = fg | mispredicted
    return Fraction(len(mispredicted), len(union)) if union else Fraction(0)


def lovasz_extension(errors: list[float], fg: set[int]) -> float:
    """int_0^inf Delta({i : m_i >= t}) dt, as a sum over the distinct error values (level sets)."""
    levels = sorted(set(errors), reverse=True) + [0.0]
    total = 0.0
    for upper, lower in zip(levels[:-1], levels[1:], strict=True):
        level_set = {i for i, m in enumerate(errors) if m >= upper}
        total += (upper - lower) * float(jaccard_loss(level_set, fg))
    return total


def brute_force(probs: np.ndarray, target: np.ndarray, ignore: int | None = None) -> float:
    keep = target != ignore if ignore is not None else np.ones_like(target, bool)
    probs, target = probs[keep], target[keep]
    per_class = []
    for c in sorted(set(target.tolist())):
        fg = {i for i, y in enumerate(target) if y == c}
        errors = [abs((1.0 if i in fg else 0.0) - float(probs[i, c])) for i in range(len(target))]
        per_class.append(lovasz_extension(errors, fg))
    return sum(per_class) / len(per_class)


@pytest.mark.parametrize("seed", range(6))
def test_lovasz_softmax_is_the_lovasz_extension_of_the_jaccard_loss(seed):
    g = torch.Generator().manual_seed(seed)
    n, c = 7 + seed, 4
    probs = torch.softmax(torch.randn(n, c, generator=g, dtype=torch.float64) * 2, dim=1)
    target = torch.randint(0, c - 1, (n,), generator=g)          # class c-1 absent: not averaged
    target[0] = -1                                                  # one ignored point
    got = lovasz_softmax(probs, target, ignore_index=-1)
    assert float(got) == pytest.approx(brute_force(probs.numpy(), target.numpy(), ignore=-1), abs=1e-12)


def test_ties_do_not_change_the_value():
    probs = torch.tensor([[0.5, 0.5], [0.5, 0.5], [0.9, 0.1], [0.1, 0.9]], dtype=torch.float64)
    target = torch.tensor([0, 1, 0, 1])
    assert float(lovasz_softmax(probs, target)) == pytest.approx(brute_force(probs.numpy(), target.numpy()), abs=1e-12)


def test_on_one_hot_predictions_it_is_one_minus_iou_over_present_classes():
    rng = np.random.default_rng(0)
    target = rng.integers(0, 3, 40)
    pred = np.where(rng.random(40) < 0.7, target, rng.integers(0, 4, 40))  # class 3 predicted, never present
    probs = torch.from_numpy(np.eye(4)[pred])
    ious = []
    for c in range(3):
        inter = np.sum((pred == c) & (target == c))
        union = np.sum((pred == c) | (target == c))
        ious.append(inter / union)
    assert float(lovasz_softmax(probs, torch.from_numpy(target))) == pytest.approx(1 - np.mean(ious), abs=1e-12)


def test_all_ignored_gives_zero_with_a_zero_gradient():
    logits = torch.randn(5, 3, requires_grad=True)
    loss = lovasz_softmax(torch.softmax(logits, 1), torch.full((5,), -1), ignore_index=-1)
    loss.backward()
    assert float(loss.detach()) == 0.0 and torch.count_nonzero(logits.grad) == 0


def test_segmentation_loss_ce_is_cross_entropy_and_ce_lovasz_adds_the_weighted_term():
    g = torch.Generator().manual_seed(1)
    logits, target = torch.randn(30, 13, generator=g), torch.randint(0, 13, (30,), generator=g)
    target[:4] = 255
    ce = F.cross_entropy(logits, target, ignore_index=255)
    assert torch.equal(segmentation_loss(logits, target, "ce", 255), ce)
    lov = brute_force(torch.softmax(logits, 1).double().numpy(), target.numpy(), ignore=255)
    got = segmentation_loss(logits, target, "ce_lovasz", 255, lovasz_weight=0.5)
    assert float(got) == pytest.approx(float(ce) + 0.5 * lov, abs=1e-5)
    with pytest.raises(ValueError, match=re.escape("train.loss")):
        segmentation_loss(logits, target, "focal", 255)


def test_the_gradient_reaches_the_logits_and_lowers_the_loss():
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(50, 4, generator=g, requires_grad=True)
    target = torch.randint(0, 4, (50,), generator=g)
    before = lovasz_softmax(torch.softmax(logits, 1), target)
    before.backward()
    with torch.no_grad():
        after = lovasz_softmax(torch.softmax(logits - 0.5 * logits.grad, 1), target)
    assert float(after) < float(before.detach())
