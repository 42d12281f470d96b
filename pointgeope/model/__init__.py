"""Point Transformer with GeoPE vector attention: point ops, attention layer, segmentation network.

Imports only torch, Triton (where it imports) and the package's shared top-level modules (``geope``,
``constants``, ``errors``, ``radix``), never the data code. The names below are imported at their first use
(``from pointgeope.model import PointTransformerSeg``), not with the package: :mod:`pointgeope.model.config`,
with :mod:`pointgeope.model.presets`, is read without torch (a run's config, checked before the network is
imported).
"""
import importlib

# Each name of __all__ -> its module in this package.
_WHERE = {"ModelConfig": "config", "PointTransformerSeg": "network", "PointTransformerLayer": "attention",
          "PointTransformerBlock": "network", "PositionalEncoding": "presets", "PRESETS": "presets",
          "OpsBackends": "network", "HierarchySpec": "ops", "PointHierarchy": "ops"}

__all__ = list(_WHERE)


def __getattr__(name: str):
    """A name of ``__all__``, imported from its module at its first use (PEP 562)."""
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
