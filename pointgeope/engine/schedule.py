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

``optim.block_lr`` sets the rate of the ``block`` parameters (None: no such group, PTv1's groups as they
were); ``optim.scheduler: onecycle`` the schedule with ``optim.pct_start``, ``optim.anneal_strategy``,
``optim.div_factor`` and ``optim.final_div_factor``. Each group's peak is the ``lr`` it was given.
"""
from __future__ import annotations

import torch

BLOCK_KEYWORD = "block"   # Pointcept's param_dicts keyword: the parameters of PTv3's blocks


def keyword_groups(groups: list[dict], net: torch.nn.Module, keyword: str, lr: float) -> list[dict]:
    """``groups`` (optimiser parameter groups of ``net``'s parameters) with each split in two: the parameters
    whose name in ``net.named_parameters()`` contains ``keyword`` go to a copy of their group with ``lr``;
    no empty group. The other keys of a group (its weight decay) are kept by both halves."""
    names = {id(p): name for name, p in net.named_parameters()}
    out = []
    for group in groups:
        missing = [p for p in group["params"] if id(p) not in names]
        if missing:
            raise ValueError(f"expected the parameters of the groups to be net's, found {len(missing)} others")
        rest = [p for p in group["params"] if keyword not in names[id(p)]]
        hits = [p for p in group["params"] if keyword in names[id(p)]]
        if rest:
            out.append({**group, "params": rest})
        if hits:
            out.append({**group, "params": hits, "lr": lr})
    return out


def one_cycle(opt: torch.optim.Optimizer, total_steps: int, pct_start: float = 0.05, anneal_strategy: str = "cos",
              div_factor: float = 10.0, final_div_factor: float = 1000.0) -> torch.optim.lr_scheduler.OneCycleLR:
    """torch's ``OneCycleLR`` over ``total_steps`` optimiser steps whose peak in each group is the group's
    ``lr`` (module docstring); it sets every group's ``lr`` to its start, ``lr / div_factor``."""
    if total_steps < 1:
        raise ValueError(f"expected total_steps >= 1, got {total_steps}")
    peaks = [group["lr"] for group in opt.param_groups]
    return torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=peaks, total_steps=total_steps, pct_start=pct_start, anneal_strategy=anneal_strategy,
        div_factor=div_factor, final_div_factor=final_div_factor, cycle_momentum=True, base_momentum=0.85,
        max_momentum=0.95)
