"""Print the versions of pointgeope and its dependencies, the compute device and the ops backends."""
from __future__ import annotations

import argparse

HELP = "print versions, the device and the active ops backends"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    del parser  # no options


def main(args: argparse.Namespace) -> int:
    from pointgeope.info import print_info

    print_info()
    return 0
