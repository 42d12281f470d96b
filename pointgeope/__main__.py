"""``python -m pointgeope`` runs the command-line interface."""
import sys

from pointgeope.cli import main

sys.exit(main())
