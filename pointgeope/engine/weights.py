"""A checkpoint's model weights, checked before a network takes them: the one way a run, ``evaluate`` and
``predict`` load a checkpoint's ``"model"`` entry.

Three things are refused, each in one line naming the file (a :class:`~pointgeope.engine.checkpoint.CheckpointError`):

- a damaged body: no ``"model"`` entry, or one that is not a state dict (names -> tensors);
- weights that are not finite: a NaN or an infinity in any floating-point tensor (a checkpoint copied from a
  run that diverged, or damaged on disk). Such a network predicts one class everywhere (every logit NaN:
  ``argmax`` gives class 0) without a word, so the first tensor holding one is named;
- weights that do not fit the network (other shapes or names: written with other ``model.*`` settings).
"""
from __future__ import annotations

from pathlib import Path

import torch

from pointgeope.engine.checkpoint import CheckpointError
from pointgeope.plural import counted
from pointgeope.recorded_text import bounded


def model_state(ckpt: dict, path: str | Path) -> dict[str, torch.Tensor]:
    """The checkpoint's ``"model"`` state dict; a CheckpointError naming ``path`` when it is missing, is not
    a dict of tensors, or holds a non-finite value (:func:`first_non_finite`)."""
    state = ckpt.get("model")
    if not isinstance(state, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                              for k, v in state.items()):
        got = "no 'model' entry" if "model" not in ckpt else f"a {type(state).__name__} that is not names -> tensors"
        raise CheckpointError(f"{path}: damaged checkpoint: expected its 'model' weights (a state dict), got {got}; "
                              "use the fold's own last.pt or best.pt again, or train the fold")
    bad = first_non_finite(state)
    if bad is not None:
        name, count, size = bad
        raise CheckpointError(f"{path}: the weights are not finite: '{name}' holds "
                              f"{counted(count, 'NaN or infinite value')} of {size:,} (the first such tensor; a run "
                              "that diverged?); use a checkpoint saved before that, or train again")
    return state


def first_non_finite(state: dict[str, torch.Tensor]) -> tuple[str, int, int] | None:
    """``(name, non-finite values, values)`` of the first floating-point tensor of ``state`` (in its order)
    holding a NaN or an infinity, ``None`` when every value is finite."""
    for name, tensor in state.items():
        if tensor.is_floating_point() or tensor.is_complex():
            finite = torch.isfinite(tensor)
            if not bool(finite.all()):
                return name, int(finite.numel() - finite.sum()), int(finite.numel())
    return None


def load_model_state(model: torch.nn.Module, ckpt: dict, path: str | Path) -> None:
    """``model.load_state_dict`` of the checkpoint ``ckpt``'s weights (:func:`model_state`), a shape or key
    mismatch reported against ``path``."""
    state = model_state(ckpt, path)
    try:
        model.load_state_dict(state)
    except RuntimeError as err:
        said = " ".join(line.strip() for line in str(err).strip().splitlines())   # every line: a cut is marked
        raise CheckpointError(f"{path}: the weights do not fit this model ({bounded(said, 600)}); "
                              "was it written with other model.* settings?") from None
