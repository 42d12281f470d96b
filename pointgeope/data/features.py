"""The layout of the network's input features ``x``: which channels a config's ``data`` section gives.

The one owner of that rule: the samples (``ToData``, :func:`pointgeope.data.ptv3_dataset.ptv3_data`), the check
of ``model.in_channels`` (``engine.build.model``) and the layout a checkpoint records for ``predict``
(``engine.prediction_info``) all read it here::

    data.color  data.normal  data.height   x                                 in_channels
    true        false        false         [ r g b | x y z ]                 6    PTv1; PTv3 before data.normal
    true        false        true          [ r g b | x y z | h ]             7    PTv1 only
    true        true         false         [ r g b | nx ny nz ]              6    PTv3 (Pointcept's S3DIS recipe)
    false       false        false         [ x y z ]                         3    geometry only
    false       true         false         [ nx ny nz ]                      3    PTv3, geometry only

``rgb`` is the colour / 255, ``xyz`` the sample's coordinates (as ``pos``), ``normal`` the unit normal
(prepare's estimate, :mod:`pointgeope.data.normals`), ``h`` the room-normalised height. ``data.normal``
replaces ``xyz`` by ``normal``, as Pointcept's S3DIS configs feed ``feat_keys=("color", "normal")``; a config
without the key (every run recorded before it) means ``false``, ``[rgb | xyz]``.
"""
from __future__ import annotations

__all__ = ["FEATURE_WIDTHS", "feature_channels", "feature_names"]

# feature name -> its channels in x
FEATURE_WIDTHS: dict[str, int] = {"rgb": 3, "xyz": 3, "normal": 3, "height": 1}


def feature_names(color: bool = True, normal: bool = False, height: bool = False) -> list[str]:
    """The features of ``x`` in their order (module docstring), e.g. ``["rgb", "normal"]``."""
    return ["rgb"] * bool(color) + ["normal" if normal else "xyz"] + ["height"] * bool(height)


def feature_channels(names: list[str] | tuple[str, ...]) -> int:
    """The channels of ``x`` for the features ``names`` (``feature_names``'s): 3 per vector, 1 for height."""
    unknown = [n for n in names if n not in FEATURE_WIDTHS]
    if unknown:
        raise ValueError(f"expected features among {sorted(FEATURE_WIDTHS)}, got {unknown}")
    return sum(FEATURE_WIDTHS[n] for n in names)
