"""Train Point Transformer on S3DIS folds: ``python train.py --config CONFIG (--test-area K | --cv) [key=value ...]``.

The same as ``pointgeope train`` (``pointgeope/commands/train.py``); the loop itself is
``pointgeope/engine/train.py``. Works under ``torchrun --nproc_per_node N train.py ...`` (DDP).
"""
import sys

if __name__ == "__main__":
    try:  # a Ctrl-C while the command line is read is one line too, as pointgeope's (pointgeope/cli.py)
        import argparse

        from pointgeope.commands import help_text, parse_args, train as train_command
        from pointgeope.errors import add_debug_argument, run_command, settle_exit

        parser = argparse.ArgumentParser(prog="train.py", description=help_text(train_command.__doc__),
                                         formatter_class=argparse.RawDescriptionHelpFormatter)
        train_command.add_arguments(parser)
        add_debug_argument(parser)
        args = parse_args(parser)
    except KeyboardInterrupt as stop:
        from pointgeope.errors import stopped

        if "--debug" in sys.argv:
            raise
        sys.exit(stopped("train.py", stop))
    sys.exit(settle_exit(run_command("train.py", train_command.main, args, debug=args.debug), "train.py"))
