"""The sub-commands of ``pointgeope``, one thin module each, in the order of the pipeline.

Every module here has the same shape, and nothing else::

    \"\"\"What the command does, with examples (shown by ``pointgeope <command> --help``).\"\"\"
    HELP = "one line for the list of ``pointgeope --help``"

    def add_arguments(parser): ...     # the options
    def main(args) -> int: ...         # turn the options into one call of the implementation, imported
                                       # inside main: ``pointgeope --help`` never imports torch or h5py

The implementation lives where the data flows (``data_prep``, ``pointgeope.engine``, ``pointgeope.report``,
``pointgeope.viz``) and takes plain values (a config, paths), except ``predict`` and ``viz``'s room view,
whose many options it reads from the parsed command line. ``pointgeope/cli.py`` builds the
parser from the list of these modules; ``train.py`` at the repository root reuses
:mod:`pointgeope.commands.train`.
"""
