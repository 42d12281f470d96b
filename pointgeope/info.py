"""The versions of pointgeope and its dependencies, the compute device and the ops backends
(``pointgeope info``)."""
from __future__ import annotations

import importlib.metadata
import importlib.util
import platform

from pointgeope.extras import INSTALL_TOOLKIT, TOOLKIT_MODULES, missing_toolkit, missing_toolkit_package
from pointgeope.plural import counted

# The base install, the toolkit's packages (torch-geometric first: the nn extra), then the optional ones.
PACKAGES = ("torch", "numpy", *TOOLKIT_MODULES.values(), "laspy", "torch-scatter", "torch-cluster", "triton")


def package_versions() -> dict[str, str | None]:
    """Installed version of each dependency, ``None`` when it is not installed (nothing is imported)."""
    out = {}
    for name in PACKAGES:
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def device_summary() -> str:
    import torch

    if torch.cuda.is_available():
        names = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        return f"cuda ({torch.cuda.device_count()}: {names}; CUDA {torch.version.cuda})"
    return f"cpu ({counted(torch.get_num_threads(), 'thread')}; no CUDA device)"


def pyg_note(installed: str | None, tested: tuple[str, ...]) -> str:
    """What ``info`` adds after the ``tested`` torch-geometric versions for the ``installed`` one: nothing if it
    is one of them, the version if it is another, how to install it if there is none."""
    if installed in tested:
        return ""
    if installed:
        return f" (installed: {installed}, not among them)"
    return ' (not installed: pip install "pointgeope[nn]")'


def print_info() -> None:
    """Print the versions, the device and the ops backends of each device."""
    from pointgeope import __version__

    print(f"pointgeope {__version__}  (Python {platform.python_version()}, {platform.platform()})")
    print("packages:")
    for name, version in package_versions().items():
        print(f"  {name:<16} {version or 'not installed'}")
    missing = missing_toolkit()
    print("toolkit (the commands; pointgeope[toolkit]): " +
          (f"missing {', '.join(missing)} ({INSTALL_TOOLKIT})" if missing else "installed"))
    print(f"device: {device_summary()}")
    from pointgeope.nn import TESTED_PYG_VERSIONS

    installed = package_versions()["torch-geometric"]
    print(f"PyG layer (pointgeope.nn.GeoPEPointTransformerConv): tested with torch-geometric "
          f"{', '.join(TESTED_PYG_VERSIONS)}{pyg_note(installed, TESTED_PYG_VERSIONS)}")
    import torch

    from pointgeope.model.ops import backends

    cuda = backends.summary("cuda") + ("" if torch.cuda.is_available() else " (no CUDA device here)")
    print("ops backends: " + backends.summary("cpu") + "; " + cuda)
    from pointgeope.model import geope_pairs

    print(f"GeoPE pair kernels: {geope_pairs.status()}")
    from pointgeope.model import kernels

    print(f"Triton kernels (point ops, attention): {kernels.status()}")
    try:
        print_training_places()
    except ModuleNotFoundError as err:        # pip install pointgeope[nn]: the layer without the commands
        if missing_toolkit_package(err) is None:
            raise
        print(f"backbones, point hierarchies: the toolkit's ({missing_toolkit_package(err)} is not installed)")


def print_training_places() -> None:
    """The backbones, and where each device builds the point hierarchy (the training configs' engine)."""
    import torch

    from pointgeope.engine.config import Config
    from pointgeope.engine.placement import hierarchy_place

    print("backbones (model.backbone): ptv1, Point Transformer v1 (configs/s3dis/pt_*.yaml); ptv3, Point "
          "Transformer V3 as Pointcept's PT-v3m1 (configs/s3dis/ptv3_*.yaml), in plain torch: no spconv, no "
          "flash-attn, no Triton kernel")
    # data.hierarchy: auto on each device (cuda's: the choice a CUDA machine with these packages makes)
    for stage, evaluation in (("training", False), ("evaluate, predict", True)):
        for d in ("cpu", "cuda"):
            print(f"ptv1 {stage} on {d}: {hierarchy_place(Config(), torch.device(d), evaluation=evaluation).line()}")
    ptv3 = Config()
    ptv3.model.backbone = "ptv3"
    print(f"ptv3 on every device: {hierarchy_place(ptv3, torch.device('cpu')).line()}")
