"""Whether a checkpoint was trained on the area files a run reads now: the checksums it records (its
``"data"``, and ``"data_points"``, those of their points alone) against the files at hand, one line naming
the files that differ, and a note where only where they were prepared from differs
(:func:`pointgeope.data.identity.same_points`). Used where a checkpoint is resumed, evaluated or its fold
completed (``engine.state``, ``engine.evaluate``, ``engine.train``).
"""
from __future__ import annotations

from pathlib import Path

from pointgeope.engine.checkpoint import CheckpointError
from pointgeope.plural import agreeing
from pointgeope.recorded_text import repr_bounded

__all__ = ["check_data_of", "check_data", "saved_data"]


def saved_data(ckpt: dict, path: str | Path) -> dict[str, str] | None:
    """The checkpoint's ``"data"`` (area -> checksum of the file it trained on; ``None`` in checkpoints written
    before it); a CheckpointError naming it where it is no such mapping (rewritten by a tool: a list was an
    ``AttributeError`` traceback on resume, a number for a checksum a ``TypeError``)."""
    data = ckpt.get("data")
    if data is None or isinstance(data, dict) and all(isinstance(x, str) for item in data.items() for x in item):
        return data
    raise CheckpointError(f"{path}: damaged checkpoint: expected its 'data' entry to map each area to the checksum "
                          f"of its file, got {repr_bounded(data, 60)}; use the run's own checkpoint")


def check_data_of(path: str | Path, ckpt: dict, now: dict[str, str | None], root: str | Path, log,
                  normals=None) -> None:
    """:func:`check_data` with what the checkpoint ``ckpt`` records: its ``"data"`` (:func:`saved_data`),
    ``"data_points"`` and the ``data.root`` of its config; then, for a run that read normals, one warning line
    through ``log`` where the files of ``now`` hold another estimate than it read
    (:func:`pointgeope.data.normal_record.differing_line`). ``normals``: the record of the normals a training that
    resumes ``ckpt`` reads (:class:`~pointgeope.data.normal_record.NormalsRead`), which keeps those it read so far
    where they differ."""
    from pointgeope.data import normal_record

    saved = saved_data(ckpt, path)  # first: the normals' record below reads its areas too
    trained_root = ((ckpt.get("config") or {}).get("data") or {}).get("root")
    read = normal_record.recorded(ckpt)
    hashed = read is not None and not isinstance(ckpt.get("data_normals"), dict)  # its points checksums hold them
    check_data(path, saved, now, root, log, ckpt.get("data_points"), trained_root, read is not None, hashed)
    if read is not None:
        at_hand = normal_record.area_estimates(root, [area for area in sorted(now) if now[area]])
        if line := normal_record.differing_line(str(path), read, at_hand, resumed=normals is not None):
            log(line)
    if normals is not None:
        normals.resumed(ckpt)


def check_data(path: str | Path, saved: dict | None, now: dict[str, str | None], root: str | Path, log,
               saved_points: dict | None = None, trained_root: str | Path | None = None,
               normals: bool = False, hashed: bool = False) -> None:
    """Refuse to use the checkpoint at ``path`` on other area files than it trained on, naming them; a file
    of another checksum that holds the same points (the same raw data prepared from another path: only its
    ``source`` and ``signature`` attributes differ; ``pointgeope.data.identity.same_points``) is used, with
    a note through ``log``.

    Args:
        saved: area -> checksum the checkpoint recorded (its ``"data"``; ``None`` in checkpoints written
            before it: a warning through ``log``, nothing checked).
        now: area -> checksum of the files the run reads now (``pointgeope.data.check.area_checksums``)
            for the areas it reads: every area of the fold to resume (``None``: one the checkpoint trained
            on that the fold no longer has), the test areas to evaluate.
        root: the data folder the files are in, for the message.
        saved_points: area -> points checksum the checkpoint recorded (its ``"data_points"``; ``None`` in
            checkpoints written before it).
        trained_root: the ``data.root`` it trained with, where its files may still be.
        normals: whether it read normals (a ``data.normal`` run): the note on files of the same points names
            them as what may differ too (they are no part of the points: :mod:`pointgeope.checksum`).
        hashed: whether its points checksums hold the normals it read too (a ``data.normal`` run recorded by the
            versions that hashed them, before ``"data_normals"``): where they differ, only those normals may.
    """
    from pointgeope.data.identity import same_points

    if saved is None:
        log(f"warning: {path} does not record the data it trained on (written by an older pointgeope); "
            "using it without checking that")
        return

    def short(checksum: str | None) -> str:
        return checksum[:19] + "..." if checksum else "nothing"

    differing = [a for a in sorted(now) if saved.get(a) != now[a]]
    same = {a: same_points(a, saved.get(a), root, saved_points, trained_root) if now[a] else False
            for a in differing}
    alike = [a for a in differing if same[a]]
    if alike:  # one line for every such file
        shown = "; ".join(f"{a}.h5 trained on {short(saved.get(a))}, now {short(now[a])}" for a in alike)
        log(f"note: {path} trained on other files than {root} holds now ({shown}), of the same points: only where "
            "they were prepared from differs (the rooms' source and signature attributes, or a record a later prepare "
            "adds beside them: no_color)"
            + (", or the normals estimated from them" if normals else "") + "; using them")
    differing = [a for a in differing if not same[a]]
    if differing:
        shown = "; ".join(f"{a}.h5 trained on {short(saved.get(a))}, now {short(now[a])}" for a in differing)
        unknown = [a for a in differing if same[a] is None]
        why = (f"; it records no checksum of their points (written by an older pointgeope), so whether "
               f"{', '.join(unknown)} {agreeing(len(unknown), 'differs', 'differ')} only in where it was prepared "
               "from (the source and signature attributes: the same raw data prepared from another path) cannot be "
               "told" if unknown else
               ": their points differ, not only where they were prepared from" + (
                   ", or only the normals it read, which the checksums of its points hold too (recorded by an older "
                   "pointgeope)" if hashed else "") if any(now[a] for a in differing) else "")  # only files gone
        raise CheckpointError(f"{path} was trained on other data than {root} holds now ({shown}){why}",
                              advice="restore the data it trained on (or set data.root to it); pointgeope train "
                                     "with --force retrains the fold from scratch")

