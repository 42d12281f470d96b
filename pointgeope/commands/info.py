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
    parser.add_argument("--device",
                        help="device of --check: auto (the default: cuda when there is one), cpu (needs "
                             "TRITON_INTERPRET=1), cuda, cuda:N")


def main(args: argparse.Namespace) -> int:
    from pointgeope.engine.config_values import device_problem
    from pointgeope.errors import UserError
    from pointgeope.info import print_info

    if args.device is not None:     # before any output, with or without --check: it was ignored without it
        problem = device_problem(args.device, "--device")
        if problem:
            raise UserError(problem)
        if not args.check:
            raise UserError(f"--device {args.device}: the device of --check, which was not given; add --check to "
                            "test the Triton kernels there (info alone prints the backends of every device)")
    print_info()
    if not args.check:
        return 0
    from pointgeope.engine.distributed import choose_device
    from pointgeope.model import kernels
    from pointgeope.model.kernel_check import check_kernels, format_table, passed

    if not kernels.triton_imports():  # before the device: POINTGEOPE_KERNELS is not the user's to unset here
        raise UserError("--check tests the Triton kernels, and Triton does not import here (pip install triton); "
                        "without it every kernel runs its torch path, which needs no check")
    device = choose_device(args.device or "auto", option="--device")
    if not kernels.runs_on(device):
        raise UserError("--check: the Triton kernels run on CUDA, and there is no CUDA device here (or --device "
                        "cpu); on the CPU only in Triton's interpreter, for tests: TRITON_INTERPRET=1")
    rows = check_kernels(device)
    print(format_table(rows))
    return 0 if passed(rows) else 1
