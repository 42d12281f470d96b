"""Which scans a rerun of ``pointgeope predict`` skips: each scan's record of what made its outputs.

After the outputs of a scan are written (each atomically, :mod:`pointgeope.scans.outputs`), a small record
``DIR/<name>_pred.json`` is written last, atomically::

    {"kind": "pointgeope-predict-record", "version": 1,
     "made_by": {"pointgeope": version, "pointgeope_commit": the commit of a checkout or null,
                 "pointgeope_modified": whether its code differed from that commit (or null),
                 "model": "sha256:<hex>" of the checkpoint file, "input": checksum of the scan's input,
                 "options": {...}},
     "model_path": the checkpoint as given, "source": the input as given,
     "made_on": the machine that predicted it (engine.machine_record: device, precision, threads, torch),
     "outputs": {file name: {"bytes": size, "sha256": "sha256:<hex>"}, ...}}

A rerun skips the scan when its record reads, its ``made_by`` equals the rerun's, and every output it
lists is there with that size and checksum; anything else (no record: a kill before the scan's last file;
another checkpoint, input or option; other code; an output missing, cut short or changed) predicts it again, and
the old record is removed before its first output is replaced. ``--force`` predicts every scan again.

The code is that of :func:`pointgeope.provenance.code_record`, as a run's ``metrics.json`` records it: the
version, and in a clone its commit and whether the code differed from it (between releases, a ``.devN`` version
names many states of the code; only the commit tells them apart). A rerun under another commit, or with edits
where there were none (or none where there were), predicts again; two states of code edited after the same
commit are not told apart (nothing records the edits), so a scan skipped whose record says the code had
uncommitted changes says so in its skip line (``--force`` predicts it again). A record of a version that
named no commit is predicted again once.

The input's checksum: ``sha256`` of the file (:func:`pointgeope.checksum.file_checksum`, 0.25 s per
100 MB on a shared 2-core machine: ``bench/bench_checksum.py``; size and time would miss a file rewritten
within the clock's step, and would count a copy or a ``touch`` as a change), of the whole area file for a
room of a prepared ``Area_N.h5`` (computed once per file, and not at all where the area's check took it: an
area file listed in its ``manifest.json``, ``ScanRef.checksum``), of every file of a raw room folder
(:func:`~pointgeope.checksum.folder_checksum`). The options are those that change the outputs:
``--format``, ``--probabilities``, ``--scale``, ``--max-extent``, and the views, vote, fragment cap,
protocol and precision of the evaluation (``--tta``, ``--max-fragments``, ``eval.*`` overrides: every
``eval`` key but those of :data:`RUN_ONLY_EVAL_KEYS`), and with ``h5`` among the formats the run's
``train.ignore_index`` that the h5 file carries (an h5 file of an older version, without it, and its record
are predicted again), and with ``ply`` the PLY's name of the prediction, ``pred`` (a PLY of a version that
named it ``label`` is predicted again), and for a network of ``data.normal`` the normal estimate
(``normal_k`` and ``normal_version``, :func:`pointgeope.data.normal_record.current`: a scan's normals made by
another estimate, or by a version that did not record it, are predicted again); not ``--device``, ``--batch-points``,
``data.hierarchy`` nor the threads, which choose how the same prediction runs, so that a rerun on another
machine resumes. The model's checksum is that of the bytes loaded (``Predictor.checksum``), the input's is
taken before the scan is read.

The machine (``made_on``) is recorded, not compared: another device, precision, torch version or thread count
gives other floats (the demo's model on 8 rooms of its data, 423,471 points, at 1 and 2 torch CPU threads: the
same labels bit for bit, the probabilities of 59 % of the points different by at most 3.6e-7), so a folder
predicted partly on one machine and partly on another holds scans of one model, input and options whose
probabilities can differ in their last bits, and whose labels can differ where two classes tie that closely.
Redoing every scan on a new machine would cost a whole prediction for that; a skipped scan made on another
machine is said in its skip line instead, naming what differs, and ``--force`` predicts it again on this one.
"""
from __future__ import annotations

import json
from pathlib import Path

from pointgeope import json_text
from pointgeope.atomic import write_text_atomic
from pointgeope.checksum import file_checksum, folder_checksum
from pointgeope.engine.device_text import NOT_RECORDED, device_text
from pointgeope.errors import one_line
from pointgeope.recorded_text import recorded_text
from pointgeope.scans.outputs import PLY_PREDICTION, output_path, write_outputs
from pointgeope.scans.scan import ScanError

KIND, VERSION = "pointgeope-predict-record", 1
# The eval.* keys that do not change what predict writes (which checkpoint: its checksum is recorded; how many
# points per pass; the mean of the metrics evaluate reports). Every other key counts, one added later too
# (tta, vote, max_fragments, protocol, amp): a key forgotten here predicts again rather than skip wrongly.
RUN_ONLY_EVAL_KEYS = ("checkpoint", "batch_points", "class_mean")


def made_by(predictor, args) -> dict:
    """What the outputs of every scan of this command depend on, besides the scan itself (module docstring);
    ``predictor``: :class:`pointgeope.engine.predict_model.Predictor`, ``args``: predict's options."""
    import dataclasses

    from pointgeope.provenance import code_record

    ev = dataclasses.asdict(predictor.cfg.eval)
    options = {"format": sorted(args.format), "probabilities": bool(args.probabilities), "scale": args.scale,
               "max_extent": args.max_extent,
               **{f"eval.{key}": value for key, value in ev.items() if key not in RUN_ONLY_EVAL_KEYS}}
    if "h5" in args.format:   # written into the h5 file: one of a version that did not is predicted again
        options["ignore_index"] = int(predictor.cfg.train.ignore_index)
    if "ply" in args.format:  # the PLY's name of the prediction: one of a version that named it label is redone
        options["ply_prediction"] = PLY_PREDICTION
    if predictor.cfg.data.normal:  # a scan's normals estimated now: another k or estimator is predicted again
        from pointgeope.data.normal_record import current

        options.update(current())
    model = predictor.checksum or file_checksum(predictor.path)   # that of the bytes loaded (load_predictor)
    return {**code_record(), "model": model,   # the version, commit and edits of this code (provenance.py)
            "options": json.loads(json.dumps(options))}  # tuples as lists, as a record reads back


class ScanRecords:
    """The records of one ``predict`` command in ``out``: :meth:`skips` a scan whose outputs are complete
    and from the same model, input, options and code (unless ``force``); :meth:`write` writes a scan's outputs
    and then its record. ``skipped``: how many scans were skipped."""

    def __init__(self, out: str | Path, predictor, args, force: bool = False):
        self.out, self.formats, self.probabilities = out, tuple(args.format), bool(args.probabilities)
        self.palette, self.names = predictor.palette, list(predictor.info["class_names"])
        self.ignore_index = predictor.cfg.train.ignore_index     # recorded in an h5 output (viz scores by it)
        self.force, self.made_by, self.model_path = force, made_by(predictor, args), str(predictor.path)
        self.made_on = made_on(predictor)
        self.skipped = 0
        self._inputs: dict[tuple, str | None] = {}

    def input_checksum(self, ref) -> str | None:
        """The checksum of ``ref``'s input (module docstring), once per file; ``None`` when it cannot be
        read (reading the scan then says why)."""
        key = (str(ref.path), ref.kind == "raw")
        if key not in self._inputs and ref.checksum:  # verified against the manifest when the inputs were listed
            self._inputs[key] = ref.checksum
        if key not in self._inputs:
            try:
                self._inputs[key] = folder_checksum(ref.path) if ref.kind == "raw" else file_checksum(ref.path)
            except OSError:
                self._inputs[key] = None
        return self._inputs[key]

    def _made_by(self, ref) -> dict | None:
        checksum = self.input_checksum(ref)
        if checksum is None:
            return None
        return {**self.made_by, "input": checksum + (f":{ref.room}" if ref.room else "")}

    def complete(self, ref) -> bool:
        """Whether ``ref``'s record matches this command and every output it lists is intact."""
        made = self._made_by(ref)
        try:
            record = self.record(ref)
            outputs = record["outputs"]
            if record.get("kind") != KIND or record.get("made_by") != made or made is None:
                return False
            names = {p.name for p in self._paths(ref)}
            if set(outputs) != names:
                return False
            folder = output_path(self.out, ref.name, "record", ref.source).parent
            return all(_intact(folder / name, outputs[name]) for name in names)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return False   # no record (or not one: damaged, edited): predicted again

    def record(self, ref) -> dict:
        """The record of ``ref`` in ``out`` as read (raises OSError, ValueError where there is none to read)."""
        return json_text.loads(output_path(self.out, ref.name, "record", ref.source).read_text())

    def skips(self, ref) -> bool:
        """``True``, with one line, when ``ref`` needs no prediction (not with ``--force``). The input's
        checksum is taken here, before the scan is read, also under ``--force``: an input rewritten while it is
        predicted then records the bytes before, and a rerun predicts it again."""
        if self.force:
            self.input_checksum(ref)
            return False
        if not self.complete(ref):
            return False
        print_notes(ref.notes)
        folder = output_path(self.out, ref.name, "record", ref.source).parent   # DIR, or DIR/Area_N for a room
        try:
            elsewhere = other_machine(self.record(ref).get("made_on"), self.made_on)
        except (OSError, ValueError, AttributeError):    # gone since complete() read it: nothing to say
            elsewhere = ""
        edited = ("; the code had uncommitted changes then and has now, which are not compared"
                  if self.made_by.get("pointgeope_modified") is True else "")
        print(one_line(f"skipped {ref.source}: its outputs in {folder} are complete, from the same model, input, "
                       f"options and code{elsewhere}{edited} (--force predicts it again)"), flush=True)
        self.skipped += 1
        return True

    def _paths(self, ref) -> list[Path]:
        kinds = self.formats + ("probs",) * self.probabilities
        return [output_path(self.out, ref.name, fmt, ref.source) for fmt in kinds]

    def write(self, ref, scan, pred, probs) -> list[Path]:
        """The outputs of ``scan`` (:func:`~pointgeope.scans.outputs.write_outputs`), then its record; its old
        record removed first, so that a kill between two files leaves none. A write that fails: ScanError."""
        record = output_path(self.out, ref.name, "record", ref.source)
        try:
            record.unlink(missing_ok=True)
            paths = write_outputs(self.out, scan, pred, self.formats, self.palette, self.names, probs,
                                  self.ignore_index)
            made = self._made_by(ref)
            if made is not None:
                outputs = {p.name: {"bytes": p.stat().st_size, "sha256": file_checksum(p)} for p in paths}
                write_text_atomic(record, json.dumps({"kind": KIND, "version": VERSION, "made_by": made,
                                                      "model_path": self.model_path, "source": ref.source,
                                                      "made_on": self.made_on,
                                                      "outputs": outputs}, indent=1) + "\n")
        except OSError as err:
            raise ScanError(f"{self.out}: cannot write the outputs of {ref.source} ({err})") from None
        return paths


def made_on(predictor) -> dict:
    """The machine that runs ``predictor`` (:func:`pointgeope.engine.machine_record.machine`: its device, and
    the precision of its ``eval.amp`` there)."""
    from pointgeope.engine.machine_record import machine

    return machine(predictor.device, predictor.cfg.eval.amp)


def other_machine(recorded, now: dict) -> str:
    """``", predicted on another machine (threads: 1 there, 2 here)"``: the words of a skip line where a
    record's machine ``recorded`` differs from ``now`` (each aspect that differs; the CPU threads not where either
    ran on CUDA, whose math runs on the device, as the report does not compare them); ``""`` where they are the
    same or the record names none (an older version)."""
    if not isinstance(recorded, dict):
        return ""

    def said(m: dict) -> dict:   # as the report says them (engine/device_text.py, recorded_text.py): one line each
        return {"device": str(device_text(m)), **{k: NOT_RECORDED if m.get(k) is None else recorded_text(m[k], kind)
                                                   for k, kind in (("precision", str), ("threads", int),
                                                                   ("torch", str))}}

    there, here = said(recorded), said(now)
    cuda = "cuda" in (recorded.get("device"), now.get("device"))
    keys = [key for key in here if there[key] != here[key] and not (key == "threads" and cuda)]
    return (", predicted on another machine (" + "; ".join(f"{key}: {there[key]} there, {here[key]} here"
                                                           for key in keys) + ")") if keys else ""


def checksum_or_none(path: str | Path) -> str | None:
    """:func:`~pointgeope.checksum.file_checksum` of ``path``, ``None`` where it cannot be read."""
    try:
        return file_checksum(path)
    except OSError:
        return None


def _intact(path: Path, expected: dict) -> bool:
    return path.stat().st_size == expected["bytes"] and file_checksum(path) == expected["sha256"]


MAX_NOTES = 20  # a scan's notes printed; the rest counted in one more line


def print_notes(notes: list[str]) -> None:
    """A scan's notes (its reader's: a raw room's lines repaired or dropped, colours clipped, ...), a ``note:``
    line each: the first :data:`MAX_NOTES`, then ``note: and N more notes``, so that the part printed is not
    taken for all of them (a raw room's parse says up to 11 lines a file)."""
    from pointgeope.plural import counted

    for note in notes[:MAX_NOTES]:
        print(f"note: {note}")
    if len(notes) > MAX_NOTES:
        print(f"note: and {counted(len(notes) - MAX_NOTES, 'more note')}")
