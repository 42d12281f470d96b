"""``python -m pointgeope`` runs the command-line interface."""
from pointgeope.cli import program

program()
