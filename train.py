"""Train Point Transformer on S3DIS folds: ``python train.py --config CONFIG (--test-area K | --cv) [key=value ...]``.

The same as ``pointgeope train`` (``pointgeope/commands/train.py``); the loop itself is
``pointgeope/engine/train.py``. Works under ``torchrun --nproc_per_node N train.py ...`` (DDP).
"""
import argparse
import sys

from pointgeope.commands import parse_args, train as train_command
from pointgeope.errors import add_debug_argument, run_command, settle_exit

if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="train.py", description=train_command.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    train_command.add_arguments(parser)
    add_debug_argument(parser)
    args = parse_args(parser)
    sys.exit(settle_exit(run_command("train.py", train_command.main, args, debug=args.debug)))
