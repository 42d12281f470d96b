"""The allowed values of the run configuration (:mod:`pointgeope.engine.config`): the range of every
numeric key, in one table, the values of the few text and list keys that a type does not fix, and the
model keys that must agree with each other.

:mod:`pointgeope.engine.config` checks each layer (file, override, checkpoint) with :func:`value_problem`
as it reads it, so that the error names the file or the override, then the merged model section with
:func:`agreement_problem`. Both return the problem as text (``None`` when there is none)::

    override 'train.epochs=0': train.epochs: expected an integer >= 1, got 0
    override 'train.device=xyz': train.device: expected auto, cpu, cuda or cuda:N (cuda:N: GPU N), got 'xyz'
    configs/x.yaml with the overrides: model.blocks: expected one entry per stage, 2 as in model.planes ...

A new numeric key of the config needs its entry here (a test checks that none is missing). This module
reads values only: it imports nothing of the config (which imports it).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pointgeope.model.config import ModelConfig


@dataclass(frozen=True)
class Range:
    """The finite values ``x`` with ``low <= x <= high`` (``low < x`` when ``open_low``; ``None``: no bound)."""

    low: float | None = None
    high: float | None = None
    open_low: bool = False

    def __contains__(self, x: float) -> bool:
        if not math.isfinite(x):
            return False
        above = self.low is None or (x > self.low if self.open_low else x >= self.low)
        return above and (self.high is None or x <= self.high)

    def __str__(self) -> str:
        """``"in [0, 1]"``, ``"> 0"``, ``">= 1"``, or ``""`` (finite, no bound)."""
        def num(x: float) -> str:
            return str(int(x)) if float(x).is_integer() else f"{x:g}"

        if self.low is not None and self.high is not None and not self.open_low:
            return f"in [{num(self.low)}, {num(self.high)}]"
        low = "" if self.low is None else f"{'>' if self.open_low else '>='} {num(self.low)}"
        high = "" if self.high is None else f"<= {num(self.high)}"
        return " and ".join(filter(None, (low, high)))


POSITIVE, AT_LEAST_0, AT_LEAST_1 = Range(0, open_low=True), Range(0), Range(1)

# Every int or float key of Config (alone, optional or in a list: each entry) and its allowed values, in
# one place; each layer (file, override, checkpoint) is checked against it as it is read, and a test
# checks that no numeric key is missing. Values outside end in one line naming the key and the range.
RANGES: dict[str, Range] = {
    "data.grid_size": POSITIVE, "data.voxel_max": AT_LEAST_1, "data.loop": AT_LEAST_1,
    "data.batch_size": AT_LEAST_1, "data.num_workers": AT_LEAST_0,
    "model.in_channels": AT_LEAST_1, "model.num_classes": Range(1, 255), "model.planes": AT_LEAST_1,
    "model.blocks": AT_LEAST_0, "model.strides": AT_LEAST_1, "model.neighbours": AT_LEAST_1,
    "model.decoder_blocks": AT_LEAST_0, "model.share_planes": AT_LEAST_1, "model.geope_base": POSITIVE,
    "optim.lr": POSITIVE, "optim.momentum": Range(0, 1), "optim.weight_decay": AT_LEAST_0,
    "optim.milestones": Range(0, 1), "optim.gamma": POSITIVE, "optim.grad_clip": POSITIVE,
    "train.epochs": AT_LEAST_1, "train.seed": Range(0, 2**32 - 1), "train.threads": AT_LEAST_1,
    "train.val_every": AT_LEAST_0, "train.checkpoint_every": AT_LEAST_0, "train.epochs_per_run": AT_LEAST_1,
    "train.ignore_index": Range(-(2**31), 255),
    "eval.tta.scales": POSITIVE, "eval.tta.rotations": AT_LEAST_1, "eval.batch_points": AT_LEAST_1,
    "eval.max_fragments": AT_LEAST_1,
}


# The devices a run (train.device) or a prediction (predict --device) can name: what the engine supports.
DEVICES = "auto, cpu, cuda or cuda:N (cuda:N: GPU N)"
_DEVICE = re.compile(r"auto|cpu|cuda(:(0|[1-9][0-9]*))?")
MAX_DEVICE_INDEX = 127  # torch keeps a device index in 8 bits: cuda:128 would silently be cuda:-128


def device_problem(value: str, name: str = "train.device") -> str | None:
    """What is wrong with the device name ``value`` of option or key ``name``, or ``None``: one of
    :data:`DEVICES` with ``N`` in 0..:data:`MAX_DEVICE_INDEX` (whether CUDA and GPU N are there is known
    when the run starts: ``distributed.choose_device``)."""
    match = _DEVICE.fullmatch(value)
    if match is None:
        return f"{name}: expected {DEVICES}, got {value!r}"
    if match.group(2) is not None and int(match.group(2)) > MAX_DEVICE_INDEX:
        return (f"{name}: expected cuda:N with a GPU number N from 0 to {MAX_DEVICE_INDEX}, got {value!r}; "
                "`nvidia-smi -L` lists this machine's GPUs")
    return None


def value_problem(value: Any, name: str) -> str | None:
    """What is wrong with ``value`` of key ``name`` alone (its type already checked), or ``None``: a number
    outside its range, a device the engine does not know, no test-time scale."""
    if name == "train.device":
        return device_problem(value, name)
    if name == "eval.tta.scales" and not value:
        return "eval.tta.scales: expected at least one scale, got []"
    return range_problem(value, name)


def range_problem(value: Any, name: str) -> str | None:
    """What is wrong with ``value`` of key ``name`` (a number, or a list of them: each; anything else is
    not checked here) against ``RANGES[name]``, or ``None``."""
    values = value if isinstance(value, list) else [value]
    allowed = RANGES.get(name, Range())  # a numeric key without an entry must at least be finite
    for i, x in enumerate(values):
        if isinstance(x, bool) or not isinstance(x, (int, float)) or x in allowed:
            continue
        kind = "an integer" if isinstance(x, int) else "a finite number"
        at = f"{name}[{i}]" if isinstance(value, list) else name
        return f"{at}: expected {' '.join(filter(None, (kind, str(allowed))))}, got {x!r}"
    return None


def agreement_problem(m: ModelConfig) -> str | None:
    """What is wrong between the model keys that must agree, or ``None``: one entry per network stage in
    each model list, the first stage unstrided, each width divisible by ``model.share_planes``."""
    for key in ("blocks", "strides", "neighbours", "decoder_blocks"):
        value = getattr(m, key)
        if len(value) != len(m.planes):
            return (f"model.{key}: expected one entry per stage, {len(m.planes)} as in model.planes "
                    f"{m.planes}, got {len(value)}: {value}")
    if m.strides and m.strides[0] != 1:
        return f"model.strides[0]: expected 1 (the first stage keeps every point), got {m.strides[0]}"
    for i, width in enumerate(m.planes):
        if width % m.share_planes:
            return f"model.planes[{i}]: expected a multiple of model.share_planes ({m.share_planes}), got {width}"
    return None
