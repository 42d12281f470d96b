"""Look at rooms and predicted segmentations: colours, camera, legend, PLY export and the Open3D viewer.

The pure parts are plain numpy and are tested without Open3D:

* :mod:`~pointgeope.viz.colors`  - point colours by mode (``rgb``, ``gt``, ``pred``, ``error``);
* :mod:`~pointgeope.viz.select`  - hiding classes, voxel downsampling and the point cap;
* :mod:`~pointgeope.viz.camera`  - the pinhole camera that frames a room, and its projection;
* :mod:`~pointgeope.viz.legend`  - the class legend and the room table printed to the terminal;
* :mod:`~pointgeope.viz.scene`   - a room (and its predictions) read from the prepared HDF5 files;
* :mod:`~pointgeope.viz.ply`     - binary PLY export of coloured points.

Only :mod:`~pointgeope.viz.render` imports Open3D, and only inside its functions;
:mod:`~pointgeope.viz.show` is what ``pointgeope viz`` does (its options: ``pointgeope/commands/viz.py``).
A mistake of the user's input is a :class:`VizError` (or ``render``'s ``DisplayError`` and
``Open3DMissing``): one line and exit code 2 through :func:`pointgeope.errors.run_command`, as every
command reports them.
"""
from pointgeope.errors import UserError


class VizError(UserError, ValueError):
    """An input of the viewer that cannot be shown: an option out of its range, a room the file does not
    hold, predictions that do not fit the room."""
