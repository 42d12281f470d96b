"""The range of every numeric key of the run configuration (:mod:`pointgeope.engine.config`), in one table
(:data:`RANGES`), and the check of a number against it (:func:`range_problem`), which returns the problem as
one line (``None`` when there is none)::

    train.epochs: expected an integer >= 1, got 0
    data.voxel_max: expected an integer <= 100000000, got 1000000000; the bound is there because ...

A new numeric key of the config needs its entry here (a test checks that none is missing). The other allowed
values (devices, test-time scales, the model keys that must agree) are :mod:`pointgeope.engine.config_values`'s.
This module reads values only: it imports nothing of the engine.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from pointgeope.number_kind import is_number


@dataclass(frozen=True)
class Range:
    """The finite values ``x`` with ``low <= x <= high`` (``low < x`` when ``open_low``; ``None``: no bound);
    ``why``: the reason for ``high``, said to a value above it; ``why_low`` that for ``low``, to a value below."""

    low: float | None = None
    high: float | None = None
    open_low: bool = False
    why: str = ""
    why_low: str = ""

    def __contains__(self, x: float) -> bool:
        if not finite(x):
            return False
        above = self.low is None or (x > self.low if self.open_low else x >= self.low)
        return above and (self.high is None or x <= self.high)

    def __str__(self) -> str:
        """``"in [0, 1]"``, ``"> 0"``, ``">= 1"``, or ``""`` (finite, no bound)."""
        def num(x: float) -> str:
            return str(int(x)) if float(x).is_integer() and abs(x) < 1e16 else f"{x:g}"   # 1e+50, not 50 digits

        if self.low is not None and self.high is not None and not self.open_low:
            return f"in [{num(self.low)}, {num(self.high)}]"
        low = "" if self.low is None else f"{'>' if self.open_low else '>='} {num(self.low)}"
        high = "" if self.high is None else f"<= {num(self.high)}"
        return " and ".join(filter(None, (low, high)))


def finite(x: float) -> bool:
    """Whether the number ``x`` is finite: every int is (``math.isfinite`` raises ``OverflowError`` for one beyond
    float's range, ``10**400``; Python compares such ints with floats exactly)."""
    return isinstance(x, int) or math.isfinite(x)


POSITIVE, AT_LEAST_0, AT_LEAST_1 = Range(0, open_low=True), Range(0), Range(1)


def sizes(low: int, high: int, why: str) -> Range:
    """A size key's range: an upper bound far above any sensible value, with the reason, so that a slip
    (an extra zero, a point count typed as k) is one line and not an allocation that never ends."""
    return Range(low, high, why=why)


# Every int or float key of Config (alone, optional or in a list: each entry) and its allowed values, in
# one place; each layer (file, override, checkpoint) is checked against it as it is read, and a test
# checks that no numeric key is missing. Values outside end in one line naming the key and the range.
# Every size key has an upper bound that says why; the memory of the neighbourhoods that the sizes imply
# together is estimated when the run starts (pointgeope.engine.memory).
RANGES: dict[str, Range] = {
    "data.grid_size": Range(1e-6, 1000, why="a voxel of that edge (metres) holds a whole building (S3DIS recipes: "
                                           "0.02 to 0.08), and the stages multiply it by their strides (1e308: inf)",
                            why_low="a micrometre is finer than any scanner's noise, and the network's position scale "
                                    "1 / grid_size overflows float32 (NaN losses) from 1e-38"),
    "data.voxel_max": sizes(1, 10**8, "a sample holds that many points, and the largest S3DIS room about 10^7"),
    "data.loop": sizes(1, 10**4, "each training room is read that many times per epoch (the authors' recipe: 30)"),
    "data.batch_size": sizes(1, 2**16, "a step holds that many samples of up to data.voxel_max points"),
    "data.num_workers": sizes(0, 1024, "each loader process holds its own copy of the data"),
    "data.crop_rate": Range(0, 1, open_low=True), "data.mix_prob": Range(0, 1),
    "model.in_channels": sizes(1, 4096, "the inputs are rgb, xyz or normal, and height: 3 to 7 features"),
    "model.num_classes": Range(1, 255, why="labels are stored as uint8 and 255 is the ignored label"),
    "model.planes": sizes(1, 2**14, "the linear layers of a stage hold planes^2 weights"),
    "model.blocks": sizes(0, 256, "each block is a layer of memory (the published network has 1 to 5)"),
    "model.strides": sizes(1, 2**16, "a stage keeps its input's points divided by the stride"),
    "model.neighbours": sizes(1, 1024, "every attention layer holds points x k x planes values (the "
                                       "published network has k = 8 to 16)"),
    "model.decoder_blocks": sizes(0, 256, "each block is a layer of memory"),
    "model.share_planes": sizes(1, 2**14, "the groups divide model.planes"),
    # pointgeope.geope_checks.check_phase_scales' bounds on every phase per unit 2^-126 <= k <= 2^66, for every
    # data.grid_size in range (pos_scale = 1 / grid_size in [1e-3, 1e6]) and every width (exponents in (-2/3, 0])
    "model.geope_base": Range(1e-20, 1e50, why="GeoPE's slowest block turns by about base^(-2/3) / (3 grid_size) "
                                               "rad a metre, which rounds to 0 in float32 (no rotation) at "
                                               "data.grid_size=1000 from about 5e51",
                              why_low="GeoPE's slowest block turns by up to base^(-2/3) / (3 grid_size) rad a metre, "
                                      "whose float32 phases overflow (NaN features) at data.grid_size=1e-6 from "
                                      "about 3e-22"),
    "model.point3drope_scale": Range(1e-36, 1e19, why="Point3DRoPE's fastest pair turns by the scale in rad a "
                                                      "metre, whose float32 phases overflow (NaN features) from 2^66",
                                     why_low="its slowest pair turns by a tenth of the scale, which rounds to 0 in "
                                             "float32 (no rotation) below 2^-126"),
    "model.ptv3.stride": sizes(1, 2**16, "a stage keeps its input's voxels divided by about the stride"),
    "model.ptv3.enc_depths": sizes(0, 256, "each block is a layer of memory (the published network has 2 to 6)"),
    "model.ptv3.enc_channels": sizes(1, 2**14, "the linear layers of a stage hold channels^2 weights"),
    "model.ptv3.enc_num_head": sizes(1, 1024, "the heads divide the stage's channels"),
    "model.ptv3.enc_patch_size": sizes(1, 2**16, "each patch's attention holds patch_size^2 scores per head"),
    "model.ptv3.dec_depths": sizes(0, 256, "each block is a layer of memory"),
    "model.ptv3.dec_channels": sizes(1, 2**14, "the linear layers of a stage hold channels^2 weights"),
    "model.ptv3.dec_num_head": sizes(1, 1024, "the heads divide the stage's channels"),
    "model.ptv3.dec_patch_size": sizes(1, 2**16, "each patch's attention holds patch_size^2 scores per head"),
    "model.ptv3.mlp_ratio": POSITIVE, "model.ptv3.attn_drop": Range(0, 1), "model.ptv3.proj_drop": Range(0, 1),
    "model.ptv3.drop_path": Range(0, 1),
    "optim.lr": POSITIVE, "optim.momentum": Range(0, 1), "optim.weight_decay": AT_LEAST_0,
    "optim.milestones": Range(0, 1), "optim.gamma": POSITIVE, "optim.grad_clip": POSITIVE,
    "optim.block_lr": POSITIVE, "optim.pct_start": Range(0, 1), "optim.div_factor": POSITIVE,
    "optim.final_div_factor": POSITIVE,
    "train.epochs": sizes(1, 10**6, "each epoch is a pass over the training rooms (the authors' recipe: 100)"),
    "train.seed": Range(0, 2**32 - 1, why="numpy and torch seeds are 32-bit"),
    "train.threads": sizes(1, 4096, "no CPU has more cores"),
    "train.val_every": sizes(0, 10**6, "it counts epochs, as train.epochs"),
    "train.checkpoint_every": sizes(0, 10**9, "it counts steps"),
    "train.epochs_per_run": sizes(1, 10**6, "it counts epochs, as train.epochs"),
    "train.ignore_index": Range(-(2**31), 255, why="labels are stored as uint8"), "train.lovasz_weight": AT_LEAST_0,
    "eval.tta.scales": Range(0, 10, open_low=True, why="a view scales the room about its centre (the published "
                                                       "tests: 0.9 to 1.1), and 1e308 made its coordinates infinite"),
    "eval.tta.rotations": sizes(1, 360, "each view is one more pass over every test room"),
    "eval.batch_points": sizes(1, 2**31 - 1, "the points of one forward pass are indexed by 32-bit integers"),
    "eval.max_fragments": sizes(1, 10**7, "each fragment is one more pass over the room"),
}


def range_problem(value: Any, name: str) -> str | None:
    """What is wrong with ``value`` of key ``name`` (a number, or a list of them: each; anything else is
    not checked here) against ``RANGES[name]``, or ``None``."""
    values = value if isinstance(value, list) else [value]
    allowed = RANGES.get(name, Range())  # a numeric key without an entry must at least be finite
    for i, x in enumerate(values):
        if not is_number(x) or x in allowed:
            continue
        kind = "an integer" if isinstance(x, int) else "a finite number"
        at = f"{name}[{i}]" if isinstance(value, list) else name
        bound = str(allowed)
        if allowed.why:  # a size: the side it crossed, and why the upper bound is there
            above = finite(x) and x > allowed.high
            bound = str(Range(high=allowed.high)) if above else str(Range(allowed.low, open_low=allowed.open_low))
            if above or (allowed.why_low and finite(x) and x > 0):  # 0, -1: the bound alone
                why = allowed.why if above else allowed.why_low
                return f"{at}: expected {kind} {bound}, got {x!r}; the bound is there because {why}"
        return f"{at}: expected {' '.join(filter(None, (kind, bound)))}, got {x!r}"
    return None
