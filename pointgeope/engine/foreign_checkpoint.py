"""A checkpoint of Pointcept's trainer given where a pointgeope checkpoint is expected, recognised for the message.

``predict`` and ``evaluate`` take the ``last.pt``/``best.pt`` of a pointgeope run (its config, fold and predict
entries). Pointcept's trainer saves ``{"epoch", "state_dict", "optimizer", "scheduler", "scaler",
"best_metric_value"}``, whose ``state_dict`` keys are its segmentor's, ``backbone.*`` and ``seg_head.*``, behind
DDP's ``module.`` prefix. Such a file is said to be one, with the API that loads it (``pointcept_state_dict``
into ``PTv3Segmentor``, docs/ptv3.md), instead of "not a pointgeope checkpoint". Its ``best_metric_value`` is a
numpy float, which ``torch.load(weights_only=True)`` refuses: the file is then recognised from the strings of
its pickle (read as opcodes, nothing executed).
"""
from __future__ import annotations

import pickletools
import zipfile
from pathlib import Path

__all__ = ["POINTCEPT_ADVICE", "is_pointcept_checkpoint", "pickled_pointcept_checkpoint"]

_PREFIXES = ("backbone.", "seg_head.", "module.backbone.", "module.seg_head.")
POINTCEPT_ADVICE = ("{path}: a checkpoint of Pointcept's trainer (a 'state_dict' of backbone.* and seg_head.* "
                    "weights), not a pointgeope run's; the commands take the last.pt or best.pt of a pointgeope "
                    "run: load it in Python with PTv3Segmentor.load_state_dict(pointcept_state_dict(path)) "
                    "(pointgeope.model.ptv3, docs/ptv3.md)")


def is_pointcept_checkpoint(ckpt) -> bool:
    """``ckpt`` (a loaded file) is a dict whose ``state_dict`` is a dict of Pointcept's segmentor keys."""
    state = ckpt.get("state_dict") if isinstance(ckpt, dict) else None
    return isinstance(state, dict) and any(isinstance(k, str) and k.startswith(_PREFIXES) for k in state)


def pickled_pointcept_checkpoint(path: str | Path, limit: int = 1 << 26) -> bool:
    """The torch zip file ``path`` pickles the key ``"state_dict"`` and a key of Pointcept's segmentor (its
    ``data.pkl`` read as pickle opcodes, at most ``limit`` bytes; False for anything else or unreadable)."""
    try:
        with zipfile.ZipFile(path) as archive:
            pickles = [i for i in archive.infolist() if i.filename.endswith("/data.pkl")
                       and i.filename.count("/") == 1 and i.file_size <= limit]
            if len(pickles) != 1:
                return False
            data = archive.read(pickles[0])
        strings = {arg for _, arg, _ in pickletools.genops(data) if isinstance(arg, str)}
    except Exception:  # noqa: BLE001 - not a zip, a damaged pickle: not recognised, the caller's own message stands
        return False
    return "state_dict" in strings and any(s.startswith(_PREFIXES) for s in strings)
