"""Augmentations of Point Transformer's S3DIS recipe, and the feature builder.

Representation. A sample in the pipeline is a ``dict`` of numpy arrays (one row per point)::

    "coord"   float32 (N, 3)  metres
    "color"   float32 (N, 3)  0..255 (the chromatic transforms work in this range and clip to it)
    "label"   int64   (N,)    0..12, constants.IGNORE_LABEL ignored
    "height"  float32 (N,)    optional, from AddNormalizedHeight
    "normal"  float32 (N, 3)  optional, unit normals (PTv3's data.normal): RandomRotate turns them and RandomFlip
                              flips them with coord; scale, jitter and distortion leave them, as Pointcept's do

Every transform is called as ``t(sample, rng)`` with the sample's ``np.random.Generator`` (no global
random state), returns a NEW dict and never writes into the arrays of its input (arrays it does not
change are shared between input and output, so no one downstream may write into them either).
``ToData`` ends the pipeline with a ``torch_geometric.data.Points``.

Default S3DIS training augmentation (``s3dis_train_transform()``, ``data.augment: ptv1``): the set of
Point Transformer's own S3DIS training script (Zhao et al. 2021, POSTECH-CVLab/point-transformer
``tool/train.py`` with ``util/transform.py``), in its order and with its parameters::

    RandomScale((0.9, 1.1))  ChromaticAutoContrast(p=0.2)  ChromaticTranslation(p=0.95, ratio=0.05)
    ChromaticJitter(p=0.95, std=0.005)  HueSaturationTranslation(hue_max=0.5, saturation_max=0.2)

``data.augment: pointcept`` is Pointcept's PTv1 S3DIS config (``configs/s3dis/semseg-pt-v1-0-base.py``)
instead: RandomScale, RandomFlip(p=0.5), RandomJitter(sigma=0.005, clip=0.02), the same auto-contrast and
translation, ChromaticJitter(std=0.05) and no hue/saturation change. RandomRotateZ (``RandomRotate``'s z case,
which PTv3's recipe uses about each axis) and ElasticDistortion are available but in neither set.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from pointgeope.data.features import feature_channels, feature_names
from pointgeope.data.hsv import shift_hue_saturation
from pointgeope.data.points import Points
from pointgeope.data.rotate import check_axis, rotate_about
from pointgeope.data.voxelize import column_min

Sample = dict[str, np.ndarray]


def _replace(sample: Sample, **arrays: np.ndarray) -> Sample:
    """A new sample dict with some arrays replaced."""
    out = dict(sample)
    out.update(arrays)
    return out


def take_points(sample: Sample, index: np.ndarray) -> Sample:
    """The rows ``index`` of every array of ``sample`` (a new sample)."""
    # np.take(axis=0) gathers (N, 3) rows about 4x faster than value[index].
    return {key: np.take(value, index, axis=0) for key, value in sample.items()}


def shift_to_origin(sample: Sample) -> Sample:
    """``coord - min(coord)`` per axis: every block the network sees starts at 0 (PTv1)."""
    return _replace(sample, coord=sample["coord"] - column_min(sample["coord"]))


def _column_range(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-column (min, max) of an (N, C) array, column by column (numpy's axis-0 reduction is slow)."""
    lo = np.array([a[:, j].min() for j in range(a.shape[1])], dtype=np.float64)
    hi = np.array([a[:, j].max() for j in range(a.shape[1])], dtype=np.float64)
    return lo, hi


def _fmt(value: object) -> str:
    return repr(tuple(value)) if isinstance(value, (list, tuple)) else repr(value)


class Transform:
    """Base: subclasses set ``_repr_fields`` (names of attributes shown by ``repr``) and ``__call__``."""

    _repr_fields: tuple[str, ...] = ()

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:  # pragma: no cover
        raise NotImplementedError(f"{type(self).__name__} must implement __call__(sample, rng)")

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={_fmt(getattr(self, k))}" for k in self._repr_fields)
        return f"{type(self).__name__}({args})"


class Compose(Transform):
    """Apply transforms in order, all drawing from the same generator."""

    def __init__(self, transforms: Sequence[Transform]):
        self.transforms = list(transforms)

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        for t in self.transforms:
            sample = t(sample, rng)
        return sample

    def __repr__(self) -> str:
        inner = "".join(f"\n  {t!r}," for t in self.transforms)
        return f"Compose([{inner}\n])" if self.transforms else "Compose([])"


class RandomScale(Transform):
    """``coord * s`` with ``s ~ U(low, high)`` (one factor, or one per axis if ``anisotropic``)."""

    _repr_fields = ("scale", "anisotropic")

    def __init__(self, scale: tuple[float, float] = (0.9, 1.1), anisotropic: bool = False):
        if len(scale) != 2 or not 0 < scale[0] <= scale[1]:
            raise ValueError(f"expected scale = (low, high) with 0 < low <= high, got {scale}")
        self.scale = tuple(float(s) for s in scale)
        self.anisotropic = anisotropic

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        s = rng.uniform(self.scale[0], self.scale[1], 3 if self.anisotropic else 1)
        return _replace(sample, coord=(sample["coord"] * s).astype(np.float32))


class RandomFlip(Transform):
    """Negate x with probability ``p``, then (independently) y with probability ``p``: of ``coord``, and of
    ``normal`` when the sample has one (Pointcept's ``RandomFlip``)."""

    _repr_fields = ("p",)

    def __init__(self, p: float = 0.5):
        self.p = p

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        sign = np.where(rng.random(2) < self.p, -1.0, 1.0)
        if (sign == 1.0).all():
            return dict(sample)
        out = dict(sample)
        for key in ("coord", "normal"):      # a normal flips with its surface
            if key in sample:
                out[key] = sample[key].copy()
                out[key][:, :2] *= sign.astype(out[key].dtype)
        return out


def box_centre(coord: np.ndarray) -> np.ndarray:
    """``(min + max) / 2`` per axis of an ``(N, 3)`` array, float64."""
    lo, hi = _column_range(coord)
    return (lo + hi) / 2


class RandomRotate(Transform):
    """With probability ``p``, ``p' = R_axis(theta) (p - c) + c`` (``rotate.rotate_about``) with
    ``theta ~ U(angle[0] pi, angle[1] pi)`` and ``c`` = ``center``, or the box centre when ``center`` is None;
    a sample's ``normal`` turns with it, ``n' = R_axis(theta) n`` (Pointcept's ``RandomRotate``). Draws
    ``rng.random()`` (the coin), then ``rng.uniform`` (the angle) if it turns, as Pointcept's ``RandomRotate``
    (PTv3's recipe) and Point Transformer's z rotation draw."""

    _repr_fields = ("angle", "axis", "center", "p")

    def __init__(self, angle: Sequence[float] = (-1.0, 1.0), axis: str = "z",
                 center: Sequence[float] | None = None, p: float = 0.5):
        check_axis(axis)
        self.angle = tuple(float(a) for a in angle)
        self.axis, self.p = axis, p
        self.center = None if center is None else tuple(float(c) for c in center)

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        if rng.random() >= self.p:
            return dict(sample)
        theta = rng.uniform(self.angle[0], self.angle[1]) * np.pi
        coord = sample["coord"]
        centre = box_centre(coord) if self.center is None else self.center
        out = _replace(sample, coord=rotate_about(coord, self.axis, theta, centre))
        if "normal" in sample:              # a direction: the same turn, about the origin
            out["normal"] = rotate_about(sample["normal"], self.axis, theta, (0.0, 0.0, 0.0))
        return out


class RandomRotateZ(RandomRotate):
    """``RandomRotate(angle, axis="z", p=p)``: with probability ``p``, rotate about the vertical axis through the
    box centre by ``theta ~ U(angle[0] * pi, angle[1] * pi)``."""

    _repr_fields = ("angle", "p")

    def __init__(self, angle: tuple[float, float] = (-1.0, 1.0), p: float = 0.5):
        super().__init__(angle, axis="z", center=None, p=p)


class RandomJitter(Transform):
    """``coord + clip(sigma * n, -clip, clip)`` with ``n ~ N(0, I)`` per point and axis."""

    _repr_fields = ("sigma", "clip")

    def __init__(self, sigma: float = 0.01, clip: float = 0.05):
        if not (sigma >= 0 and clip > 0):
            raise ValueError(f"expected sigma >= 0 and clip > 0, got sigma={sigma}, clip={clip}")
        self.sigma = sigma
        self.clip = clip

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        coord = sample["coord"]
        noise = np.clip(rng.standard_normal(coord.shape, dtype=np.float32) * np.float32(self.sigma),
                        -self.clip, self.clip)
        return _replace(sample, coord=(coord + noise).astype(np.float32))


class ElasticDistortion(Transform):
    """With probability ``p``, for each ``(granularity, magnitude)``: displace the points by a smooth
    random field, ``coord += magnitude * interp(noise)(coord)``, where ``noise`` is Gaussian on a grid of
    spacing ``granularity`` blurred twice by a 3-tap box filter along each axis (Pointcept's recipe)."""

    _repr_fields = ("params", "p")

    def __init__(self, params: Sequence[Sequence[float]] = ((0.2, 0.4), (0.8, 1.6)), p: float = 0.95):
        self.params = tuple((float(g), float(m)) for g, m in params)
        self.p = p

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        if rng.random() >= self.p:
            return dict(sample)
        from scipy import ndimage  # here, not at the top: no pipeline of the recipes uses it, every process
        from scipy.interpolate import RegularGridInterpolator  # that imports the data code paid ~0.5 s for it

        coord = sample["coord"].astype(np.float64)
        for granularity, magnitude in self.params:
            lo = coord.min(0)
            dims = ((coord - lo).max(0) // granularity).astype(int) + 3
            noise = rng.standard_normal((*dims, 3))
            for _ in range(2):
                for axis in range(3):
                    noise = ndimage.convolve1d(noise, np.full(3, 1 / 3), axis=axis, mode="constant")
            axes = [np.linspace(lo[a] - granularity, lo[a] + granularity * (dims[a] - 2), dims[a])
                    for a in range(3)]
            field = RegularGridInterpolator(axes, noise, bounds_error=False, fill_value=0.0)
            coord = coord + field(coord) * magnitude
        return _replace(sample, coord=coord.astype(np.float32))


class ChromaticAutoContrast(Transform):
    """With probability ``p``, blend the colours with their per-channel contrast stretch to 0..255:
    ``c' = (1 - b) c + b (c - lo) 255 / (hi - lo)``, ``b ~ U(0, 1)`` unless ``blend_factor`` is given
    (channels with ``hi == lo`` are left as they are)."""

    _repr_fields = ("p", "blend_factor")

    def __init__(self, p: float = 0.2, blend_factor: float | None = None):
        self.p = p
        self.blend_factor = blend_factor

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        if rng.random() >= self.p:
            return dict(sample)
        color = sample["color"]
        lo, hi = _column_range(color)
        b = rng.random() if self.blend_factor is None else self.blend_factor
        # c' = (1 - b) c + b (c - lo) s = a c + t per channel, s = 255 / (hi - lo); a = 1, t = 0 if flat.
        span = hi - lo
        s = np.where(span > 0, 255.0 / np.where(span > 0, span, 1.0), 1.0)
        a = np.where(span > 0, (1 - b) + b * s, 1.0).astype(np.float32)
        t = np.where(span > 0, -b * lo * s, 0.0).astype(np.float32)
        out = color * a
        out += t
        return _replace(sample, color=out.astype(np.float32, copy=False))


class ChromaticTranslation(Transform):
    """With probability ``p``, ``c' = clip(c + t, 0, 255)`` with one ``t ~ U(-255 ratio, 255 ratio)^3``."""

    _repr_fields = ("p", "ratio")

    def __init__(self, p: float = 0.95, ratio: float = 0.05):
        self.p = p
        self.ratio = ratio

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        if rng.random() >= self.p:
            return dict(sample)
        shift = ((rng.random(3) - 0.5) * 255 * 2 * self.ratio).astype(np.float32)
        out = sample["color"] + shift
        return _replace(sample, color=np.clip(out, 0, 255, out=out).astype(np.float32, copy=False))


class ChromaticJitter(Transform):
    """With probability ``p``, ``c' = clip(c + 255 std n, 0, 255)``, ``n ~ N(0, I)`` per point and channel."""

    _repr_fields = ("p", "std")

    def __init__(self, p: float = 0.95, std: float = 0.005):
        self.p = p
        self.std = std

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        if rng.random() >= self.p:
            return dict(sample)
        color = sample["color"]
        noise = rng.standard_normal(color.shape, dtype=np.float32)
        noise *= np.float32(self.std * 255)
        noise += color
        return _replace(sample, color=np.clip(noise, 0, 255, out=noise).astype(np.float32, copy=False))


class HueSaturationTranslation(Transform):
    """Shift every point's hue by one ``dh ~ U(-hue_max, hue_max)`` (mod 1) and scale its saturation by
    one ``r ~ U(1 - saturation_max, 1 + saturation_max)`` (clipped to [0, 1]), value unchanged, in the HSV
    model (``v = max(r, g, b)``, ``s = (max - min) / max``, hue in turns; ``hsv.shift_hue_saturation``);
    applied to every sample. The result is floored to whole colour levels, as the authors' conversion back to
    ``uint8`` does."""

    _repr_fields = ("hue_max", "saturation_max")

    def __init__(self, hue_max: float = 0.5, saturation_max: float = 0.2):
        self.hue_max = hue_max
        self.saturation_max = saturation_max

    def __call__(self, sample: Sample, rng: np.random.Generator) -> Sample:
        dh = (rng.random() - 0.5) * 2 * self.hue_max
        ratio = 1 + (rng.random() - 0.5) * 2 * self.saturation_max
        rgb = shift_hue_saturation(sample["color"], dh, ratio)
        return _replace(sample, color=np.floor(rgb).astype(np.float32))


class AddNormalizedHeight(Transform):
    """``height = (z - min z) / (max z - min z)`` (0 where the sample is flat), deterministic.

    Applied to the whole room before voxelization and cropping, it is the height above the floor as a
    fraction of the room's height, so it survives the crop and the shift of ``coord``."""

    def __call__(self, sample: Sample, rng: np.random.Generator | None = None) -> Sample:
        z = sample["coord"][:, 2]
        lo = z.min()
        span = float(z.max() - lo)
        height = (z - lo) / span if span > 0 else np.zeros_like(z)
        return _replace(sample, height=height.astype(np.float32))


class ToData(Transform):
    """End of the pipeline: ``Points(pos, x, y)``, ``x`` the network's input features in this layout (a
    checkpoint records it as ``predict.features``, see ``pointgeope/engine/checkpoint.py``)::

        x: [ r g b | x y z ]        rgb = color / 255, xyz = coord      (in_channels = 6)
           [ r g b | x y z | h ]    with height=True (needs "height")   (in_channels = 7)
           [ x y z ]                with color=False (geometry only)    (in_channels = 3)
           [ x y z | h ]            with color=False, height=True       (in_channels = 4)

    With ``color=False`` the sample's ``"color"`` is never read (it may be absent).
    """

    _repr_fields = ("height", "color")

    def __init__(self, height: bool = False, color: bool = True):
        self.height = height
        self.color = color

    @property
    def in_channels(self) -> int:
        """The channels of ``x`` (:mod:`pointgeope.data.features`, the layout's one owner)."""
        return feature_channels(feature_names(color=self.color, height=self.height))

    def __call__(self, sample: Sample, rng: np.random.Generator | None = None) -> Points:
        coord = np.asarray(sample["coord"], dtype=np.float32)
        parts = [np.asarray(sample["color"], dtype=np.float32) / 255.0] if self.color else []
        parts.append(coord)
        if self.height:
            if "height" not in sample:
                raise KeyError("ToData(height=True) expected a 'height' array in the sample "
                               "(apply AddNormalizedHeight first), got keys " + str(sorted(sample)))
            parts.append(np.asarray(sample["height"], dtype=np.float32)[:, None])
        x = np.concatenate(parts, axis=1) if len(parts) > 1 else coord.copy()
        return Points(pos=torch.from_numpy(coord.copy()), x=torch.from_numpy(x),
                    y=torch.from_numpy(np.asarray(sample["label"], dtype=np.int64).copy()))


AUGMENTATIONS = ("ptv1", "pointcept", "none")


def s3dis_train_transform(variant: str = "ptv1") -> Compose:
    """The S3DIS training augmentation ``variant`` (see the module docstring): ``"ptv1"`` (the authors'
    set, the default), ``"pointcept"`` (Pointcept's PTv1 config) or ``"none"``."""
    if variant == "ptv1":
        return Compose([RandomScale((0.9, 1.1)), ChromaticAutoContrast(p=0.2, blend_factor=None),
                        ChromaticTranslation(p=0.95, ratio=0.05), ChromaticJitter(p=0.95, std=0.005),
                        HueSaturationTranslation(hue_max=0.5, saturation_max=0.2)])
    if variant == "pointcept":
        return Compose([RandomScale((0.9, 1.1)), RandomFlip(p=0.5), RandomJitter(sigma=0.005, clip=0.02),
                        ChromaticAutoContrast(p=0.2, blend_factor=None), ChromaticTranslation(p=0.95, ratio=0.05),
                        ChromaticJitter(p=0.95, std=0.05)])
    if variant == "none":
        return Compose([])
    raise ValueError(f"expected an augmentation in {AUGMENTATIONS}, got {variant!r}")
