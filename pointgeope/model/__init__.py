"""Point Transformer with GeoPE vector attention: point ops, attention layer, segmentation network.

Imports only torch, Triton (where it imports) and the package's shared top-level modules (``geope``,
``constants``, ``errors``, ``radix``), never the data code. The names below are imported at their first use
(``from pointgeope.model import PointTransformerSeg``), not with the package: :mod:`pointgeope.model.config`,
with :mod:`pointgeope.model.presets`, is read without torch (a run's config, checked before the network is
imported).
"""
import importlib
import importlib.util
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # for the readers of the source (type checkers; mkdocstrings, which renders docs/api/model.md)
    from pointgeope.model.attention import PointTransformerLayer
    from pointgeope.model.config import ModelConfig
    from pointgeope.model.network import OpsBackends, PointTransformerBlock, PointTransformerSeg
    from pointgeope.model.ops import HierarchySpec, PointHierarchy
    from pointgeope.model.presets import PRESETS, PositionalEncoding

# Each name of __all__ -> its module in this package.
_WHERE = {"ModelConfig": "config", "PointTransformerSeg": "network", "PointTransformerLayer": "attention",
          "PointTransformerBlock": "network", "PositionalEncoding": "presets", "PRESETS": "presets",
          "OpsBackends": "network", "HierarchySpec": "ops", "PointHierarchy": "ops"}

__all__ = ["ModelConfig", "PointTransformerSeg", "PointTransformerLayer", "PointTransformerBlock", "PositionalEncoding",
           "PRESETS", "OpsBackends", "HierarchySpec", "PointHierarchy"]  # _WHERE's names, written out for the readers


def __getattr__(name: str):
    """A name of ``__all__``, imported from its module at its first use (PEP 562); a submodule's name, that
    submodule (``import pointgeope.model as m; m.network``: the eager package had imported it)."""
    if name in _WHERE:
        value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    elif _is_submodule(name):
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def _is_submodule(name: str) -> bool:
    """Whether ``name`` is a module of this package (an identifier, no dunder: ``hasattr`` looks those up)."""
    return (name.isidentifier() and not name.startswith("__")
            and importlib.util.find_spec(f"{__name__}.{name}") is not None)


def __dir__() -> list[str]:
    return sorted({*globals(), *_WHERE})
