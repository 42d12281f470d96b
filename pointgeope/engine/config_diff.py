"""Which config keys may differ between a checkpoint and the run that resumes, evaluates or reuses it, and the
differences of the others: the one comparison of a saved config with the current one (``load_checkpoint``'s
refusal, ``train``'s skip of a complete fold, ``ablate``'s reuse of a trial's folds).

A difference is ``(key, saved value, current value)`` by dotted key (``model.pe``, ``optim.lr``); a key the saved
config lacks (written before the key existed) counts as it was then (``record_keys.as_recorded``), else at its
default, and a key neither config's optimiser, schedule or loss reads is none (``config_choices.unread``).
"""
from __future__ import annotations

from pointgeope.engine.config_choices import unread
from pointgeope.engine.record_keys import as_recorded
from pointgeope.plural import first_of
from pointgeope.recorded_text import setting_repr

__all__ = ["FREE_KEYS", "FREE_SECTIONS", "config_differences", "describe_differences"]

# Config keys that may differ between a checkpoint and the run that resumes (or evaluates) it: where files
# live, how fast, in how much memory or how verbosely it runs, and how the final evaluation is done. Any
# other difference is an error. data.hierarchy (where the point hierarchy is built: the same samples on
# every backend and place), data.cache (rooms held in memory or read again) and train.cuda_graphs (a step
# replayed from a graph equals the eager step) change speed and memory only, so a fold interrupted on one
# machine resumes on another, or with the cache off after running out of memory. train.threads changes the
# weights too (torch's CPU kernels split their sums by thread): it is free so that a fold resumes on another
# machine, with a warning (state.py); what states scores names the count (engine/trained_threads.py).
FREE_KEYS = frozenset({"data.root", "data.num_workers", "data.hierarchy", "data.cache", "train.run_dir", "train.device",
                       "train.threads", "train.progress", "train.epochs_per_run", "train.checkpoint_every",
                       "train.cuda_graphs"})
FREE_SECTIONS = ("eval.",)


def config_differences(saved: dict, current: dict) -> list[tuple[str, object, object]]:
    """``(key, saved value, current value)`` for every non-free key whose values differ; a key that the
    saved config lacks (written before the key existed) counts as it was then (``record_keys.as_recorded``),
    else as its default (``Config()``'s). A key that the optimiser, schedule or loss of neither config reads
    (``config_choices.unread``: ``optim.momentum`` under AdamW in both) is no difference: it changed nothing."""
    from pointgeope.engine.config import Config, config_to_dict

    saved = as_recorded(saved)
    return [(key, a, b) for key, a, b in _differences(saved, current, "", config_to_dict(Config()))
            if not (unread(saved, key) and unread(current, key))]


def _differences(saved: dict, current: dict, prefix: str, defaults) -> list[tuple[str, object, object]]:
    out = []
    for key in sorted(set(saved) | set(current)):
        name = f"{prefix}{key}"
        if name in FREE_KEYS or name.startswith(FREE_SECTIONS):
            continue
        default = defaults.get(key) if isinstance(defaults, dict) else None
        a, b = saved.get(key, default), current.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += _differences(a, b, f"{name}.", default)
        elif a != b:
            out.append((name, a, b))
    return out


def describe_differences(diff: list[tuple[str, object, object]], label: str) -> str:
    """``"key: <label> a, now b; ...; and N more"`` of :func:`config_differences` (8 said), for messages."""
    return first_of([f"{k}: {label} {setting_repr(a)}, now {b!r}" for k, a, b in diff], 8, "; ")  # (a: recorded)
