"""PTv3's optimisation recipe: the lower learning rate of the ``block`` parameters, and the one-cycle schedule.

Pointcept's S3DIS PTv3 config: ``AdamW(lr=0.006, weight_decay=0.05)``, ``param_dicts = [dict(keyword="block",
lr=0.0006)]`` (every parameter whose name contains ``block``, i.e. the attention blocks of the encoder and
decoder, in a group of its own at a tenth of the rate: Pointcept's ``build_optimizer``), and
``OneCycleLR(max_lr=[0.006, 0.0006], pct_start=0.05, anneal_strategy="cos", div_factor=10,
final_div_factor=1000)`` stepped after every optimiser step, over ``total_steps`` = steps per epoch x epochs.

The one cycle of group ``g`` with peak ``lr_g`` (torch's ``OneCycleLR``), at step ``s`` of ``T``::

    lr_0   = lr_g / div_factor                        (0.0006 and 0.00006)
    warm-up, s <= pct_start * T - 1:   lr_0 -> lr_g            (cosine: a + (b - a)(1 - cos(pi t)) / 2)
    anneal,  afterwards:               lr_g -> lr_0 / final_div_factor

and, as torch's (and so Pointcept's) default ``cycle_momentum=True``, AdamW's ``beta1`` goes the other
way, 0.95 -> 0.85 -> 0.95.

The warm-up's last step ``pct_start * T - 1`` is where the peak is. When it is exactly 0 (``pct_start * T ==
1``, e.g. 0.05 x 20 steps: a short run, ``train.epochs: 1`` of the demo) torch's ``OneCycleLR`` divides by the
warm-up's span, 0, and raises ``ZeroDivisionError``; Pointcept's S3DIS run (51,000 steps on Area 5's fold)
never meets it. There the warm-up is the one step 0 at the peak, i.e. none: the anneal runs from the peak at
step 0 to step ``T - 1``, the value of every ``pct_start * T < 1`` at step 0 (:func:`warm_up_fraction` gives torch the
largest ``pct_start`` below, whose warm-up ends before step 0; every other ``T`` is torch's as it was).

``optim.block_lr`` sets the rate of the ``block`` parameters (None: no such group, PTv1's groups as they
were), but for learnt positional frequencies (``net.frequency_parameters()``, which Pointcept's PTv3 does not
have): they train at ``optim.lr`` without weight decay as PTv1's do, although the encoding PTv3's attention
layers share is registered under the first block's name (``enc.enc0.block0.attn.pe``); ``optim.scheduler:
onecycle`` the schedule with ``optim.pct_start``, ``optim.anneal_strategy``, ``optim.div_factor`` and
``optim.final_div_factor``. Each group's peak is the ``lr`` it was given.
"""
from __future__ import annotations

import math
from collections.abc import Iterable

import torch

BLOCK_KEYWORD = "block"   # Pointcept's param_dicts keyword: the parameters of PTv3's blocks


def keyword_groups(groups: list[dict], net: torch.nn.Module, keyword: str, lr: float,
                   keep: Iterable[torch.nn.Parameter] = ()) -> list[dict]:
    """``groups`` (optimiser parameter groups of ``net``'s parameters) with each split in two: the parameters
    whose name in ``net.named_parameters()`` contains ``keyword`` go to a copy of their group with ``lr``,
    except those of ``keep``, which stay where they are whatever their name; no empty group. The other keys
    of a group (its weight decay) are kept by both halves."""
    kept = {id(p) for p in keep}
    names = {id(p): name for name, p in net.named_parameters()}
    out = []
    for group in groups:
        missing = [p for p in group["params"] if id(p) not in names]
        if missing:
            raise ValueError(f"expected the parameters of the groups to be net's, found {len(missing)} others")
        moves = [keyword in names[id(p)] and id(p) not in kept for p in group["params"]]
        hits = [p for p, move in zip(group["params"], moves, strict=True) if move]
        rest = [p for p, move in zip(group["params"], moves, strict=True) if not move]
        if rest:
            out.append({**group, "params": rest})
        if hits:
            out.append({**group, "params": hits, "lr": lr})
    return out


def warm_up_fraction(pct_start: float, total_steps: int) -> float:
    """``pct_start``, or when its warm-up would end exactly at step 0 (``float(pct_start * total_steps) - 1 ==
    0``, torch's division by zero) the largest float below it whose warm-up ends before step 0 (so none):
    the lr at step ``s`` is then the anneal's from the peak, ``(s + e) / (T - 1 + e)`` of the way with
    ``e < 1e-15``."""
    if float(pct_start * total_steps) - 1 != 0:
        return pct_start
    pct = pct_start
    while float(pct * total_steps) >= 1:
        pct = math.nextafter(pct, 0.0)
    return pct


def one_cycle(opt: torch.optim.Optimizer, total_steps: int, pct_start: float = 0.05, anneal_strategy: str = "cos",
              div_factor: float = 10.0, final_div_factor: float = 1000.0) -> torch.optim.lr_scheduler.OneCycleLR:
    """torch's ``OneCycleLR`` over ``total_steps`` optimiser steps whose peak in each group is the group's
    ``lr`` (module docstring); it sets every group's ``lr`` to its start, ``lr / div_factor`` (a warm-up that
    ends at step 0 is none: :func:`warm_up_fraction`)."""
    if total_steps < 1:
        raise ValueError(f"expected total_steps >= 1, got {total_steps}")
    peaks = [group["lr"] for group in opt.param_groups]
    return torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=peaks, total_steps=total_steps, pct_start=warm_up_fraction(pct_start, total_steps),
        anneal_strategy=anneal_strategy,
        div_factor=div_factor, final_div_factor=final_div_factor, cycle_momentum=True, base_momentum=0.85,
        max_momentum=0.95)
