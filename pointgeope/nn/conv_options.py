"""The options of :class:`~pointgeope.nn.point_transformer_conv.GeoPEPointTransformerConv`, checked when
the layer is built, each refusal one line naming the option (``TypeError`` for a wrong type, ``ValueError``
for a wrong value or combination):

- :func:`check_options`: the sizes and numbers (``in_channels``, ``out_channels``, ``axes``; ``pos_scale``,
  ``base``, ``grid_unit`` finite and ``> 0``) and the combinations the layer could only ignore or fail on
  later (a ``pos_nn`` without a ``delta_ij`` term, ``"pointrope"`` without a ``grid_unit``, fewer than 3
  rotated channels);
- :func:`check_read`: the options set away from their defaults that the encoding does not read
  (:func:`pointgeope.model.attention.options_read`, the rule the training config applies to GeoPE's keys),
  which would change nothing.
"""
from __future__ import annotations

from collections.abc import Callable

from pointgeope.model.attention import PRESETS, PositionalEncoding, options_read
from pointgeope.nn.checks import check_count, check_scale

__all__ = ["preset_name", "pe_argument", "check_options", "check_read"]


def preset_name(pe: PositionalEncoding) -> str:
    """The key of `pe` in `PRESETS`, or its `repr` for another encoding."""
    return next((name for name, preset in PRESETS.items() if preset == pe), repr(pe))


def pe_argument(pe: PositionalEncoding) -> str:
    """The ``pe=`` argument that builds `pe`, for a line: its preset's key quoted (``'geope'``), or its `repr`."""
    name = preset_name(pe)
    return repr(name) if name in PRESETS else name


def check_read(pe: PositionalEncoding, defaults: dict, **options) -> None:
    """Refuse, in one line, the `options` set away from their `defaults` (the layer's: option -> default)
    that `pe` does not read (`options_read`, the rule the training config applies to GeoPE's keys): they
    would change nothing."""
    read = options_read(pe, options["mixed_init"])
    unread = [f"{name}={value!r}" for name, value in options.items() if value != defaults[name] and name not in read]
    if unread:
        them, they = ("them", "they") if len(unread) > 1 else ("it", "it")
        mixed = f" with mixed_init={options['mixed_init']!r}" if pe.rotation == "rope-mixed" else ""
        raise ValueError(f"{', '.join(unread)}: pe={pe_argument(pe)}{mixed} does not read {them}, so {they} would "
                         f"change nothing (it reads "
                         f"{'only ' + ', '.join(read) if read else 'no frequencies or grid'}); remove {them}")


def check_options(pe: PositionalEncoding, in_channels, out_channels, pos_nn: Callable | None, pos_scale, base,
                  axes, grid_unit) -> tuple[int, float, float, int, float | None]:
    """Refuse the arguments and combinations that the layer could only ignore, fail on later or turn into NaN
    (`pos_scale`, `base`, `grid_unit`: finite and > 0).

    Returns `(out_channels, pos_scale, base, axes, grid_unit)` as checked numbers (`int`, `float`).
    """
    for size in in_channels if isinstance(in_channels, tuple) else (in_channels,):
        if size != -1:
            check_count("in_channels", size)
    out_channels = check_count("out_channels", out_channels)
    pos_scale, base = check_scale("pos_scale", pos_scale), check_scale("base", base)
    if grid_unit is not None:
        grid_unit = check_scale("grid_unit", grid_unit, " (PointROPE's cell size)")
    axes = check_count("axes", axes)
    if axes not in (1, 2, 3):
        raise ValueError(f"expected axes in (1, 2, 3), got {axes}")
    if pos_nn is not None and not pe.needs_delta:
        raise ValueError(f"expected no pos_nn with {pe}, which has no delta_ij term, got {pos_nn}")
    if pe.rotation == "pointrope" and grid_unit is None:
        raise ValueError("expected a grid_unit > 0 (PointROPE's cell size) with pe='pointrope', got None")
    if pe.rotates and out_channels < 3:
        raise ValueError(f"expected out_channels >= 3 (one rotated block) for {pe}, got {out_channels}")
    return out_channels, pos_scale, base, axes, grid_unit
