"""Print the versions of pointgeope and its dependencies, the compute device and the ops backends.

``--check`` also runs every Triton kernel once on the device (the recipe's sizes on CUDA) against its torch
path and prints a table: kernel, path (``triton``, or the torch fallback with the error), largest difference,
time. Exit code 1 if a kernel fell back or differs."""
from __future__ import annotations

import argparse

HELP = "print versions, the device and the active ops backends (--check: test every Triton kernel)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="store_true",
                        help="run every Triton kernel once on the device against its torch path (a table)")
    parser.add_argument("--device", default=None,
                        help="device of --check (default: cuda when there is one; cpu needs TRITON_INTERPRET=1)")


def main(args: argparse.Namespace) -> int:
    from pointgeope.info import print_info

    print_info()
    if not args.check:
        return 0
    import torch

    from pointgeope.errors import UserError
    from pointgeope.model.kernel_check import check_kernels, format_table, passed

    name = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise UserError(f"--device: expected a torch device such as cuda or cpu, got {name!r} ({err})") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError("--device cuda: no CUDA device is visible here; run --check on a GPU machine")
    rows = check_kernels(device)
    print(format_table(rows))
    return 0 if passed(rows) else 1
