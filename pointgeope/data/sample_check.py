"""A training sample's input features checked finite where the dataset makes them: a refusal names the room and
the room's point whose features are not, and what to do.

``S3DISTrain`` and ``S3DISTrainPTv3`` check every sample's ``x`` (:func:`check_sample`: one ``isfinite`` pass, on
the CPU in the loader's worker, as the collation's check). A NaN or an infinity there would turn every logit of
its cloud into NaN. Where a sample fails, which is rare, it is made again from its own generator
(``sample_rng(seed, epoch, index)``: the same points) with each point's row in its room as the array ``"row"``
(:data:`ROW`; the transforms carry every array of a sample along, ``transforms.take_points``), so the message
names the room's point, not a row of a cropped, shuffled block. It then reads the room's stored arrays the
features are made of (``coord``, ``color``, ``normal``): prepare refuses non-finite ones, so where they are finite
the sample's pipeline (its transform, the height) made the NaN, and where one is not (one such coordinate makes
every point's NaN: the room is shifted by its minimum), the area file is not what prepare wrote, and preparing it
again mends it::

    expected finite x (the features of training sample 3), got 2 NaN or infinite entries, the first at point 37
    of room 'office_1' of Area_1 (s3dis/Area_1.h5; the sample's row 129: [0.87, nan, ...]); the room's stored
    coord, color are finite, so the sample's pipeline made it: check its transform (PoisonRow()) on that point

The loader's check at collation (``data.loader``) stays for any other dataset, naming the sample of the batch;
:func:`checks_its_samples` is the one place that decides which datasets it skips: those whose class defines
``__getitem__`` together with ``checks_samples = True`` (a subclass that overrides ``__getitem__``, or adds a
``__getitems__``, is checked again by the loader, as its samples may no longer pass through :func:`check_sample`).
"""
from __future__ import annotations

import torch
from torch import Tensor

from pointgeope.data.check import nonfinite_points
from pointgeope.recorded_text import repr_bounded

__all__ = ["ROW", "check_sample", "checks_its_samples"]

ROW = "row"   # the sample array of each point's row in its room, made only to name a refused point
_STORED = ("coord", "color", "normal")   # the room's stored arrays that features are made from


def checks_its_samples(dataset) -> bool:
    """Whether ``dataset`` checks every sample's ``x`` as it makes it (:func:`check_sample`), so the loader need not
    check them again: the class whose ``__getitem__`` it runs says so with ``checks_samples = True`` beside it, and
    so does the class of its ``__getitems__``, if any (torch's fetcher takes a batch's samples through that one)."""
    mro = type(dataset).__mro__
    owners = [next((c for c in mro if name in vars(c)), None) for name in ("__getitem__", "__getitems__")]
    return owners[0] is not None and all(vars(owner).get("checks_samples", False) is True
                                         for owner in owners if owner is not None)


def check_sample(dataset, index: int, x: Tensor) -> None:
    """``ValueError`` unless every entry of sample ``index``'s features ``x`` (N, C) is finite (module
    docstring). ``dataset``: an ``S3DISTrain`` (``rooms``, ``store``, ``transform`` and ``sample(index,
    rows=True)``)."""
    bad = ~torch.isfinite(x)
    if not bool(bad.any()):
        return
    row = int(bad.reshape(x.shape[0], -1).any(1).nonzero()[0])
    room = dataset.rooms[index % len(dataset.rooms)]
    rows = dataset.sample(index, rows=True)[0].get(ROW)
    at = (f"the first at point {int(rows[row])} of room {room.name!r} of {room.area} ({room.path}; the sample's "
          f"row {row}: {x[row].tolist()})") if rows is not None and len(rows) == x.shape[0] else (
          f"the first in the sample's row {row} ({x[row].tolist()}), from room {room.name!r} of {room.area} "
          f"({room.path}): its transform kept no {ROW!r} array, so which point of the room is not known")
    head = (f"expected finite x (the features of training sample {index}), got {int(bad.sum())} NaN or infinite "
            f"entries, {at}")
    if rows is None or len(rows) != x.shape[0]:
        raise ValueError(f"{head}; check the dataset's transform ({repr_bounded(dataset.transform, 300)})")
    stored = dataset.store.read(room)
    names = [name for name in _STORED if name in stored]
    for name in names:           # one non-finite stored value makes others too (the shift by the room's minimum)
        if (bad_points := nonfinite_points(stored[name])) is not None:
            point = bad_points[1]
            raise ValueError(f"{head}; the room's stored {name} of point {point} is {stored[name][point].tolist()}, "
                             f"which prepare refuses: {room.path} is not the file prepare wrote; run `pointgeope "
                             f"prepare` again into {room.path.parent}")
    raise ValueError(f"{head}; the room's stored {', '.join(names)} are finite, so the sample's pipeline made it: "
                     f"check its transform ({repr_bounded(dataset.transform, 300)}) on that point")
