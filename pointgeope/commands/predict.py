"""Segment your own scans with a trained model: one label per input point, in input order.

    pointgeope predict runs/pt_geope/area_5 scan.ply --out pred/            # pred/scan_pred.npy, .ply
    pointgeope predict model.pt scans/ room.las --out pred/ --format ply,las,h5 --probabilities
    pointgeope predict runs/demo/area_1 cloud_mm.txt --out pred/ --scale 0.001 --tta
    pointgeope predict runs/pt_geope/area_5 dense.ply --out pred/ --max-fragments 20 eval.tta.rotations=4
    pointgeope viz pred/scan_pred.h5 --mode pred                            # with --format h5

Inputs: .ply (ascii/binary), .las/.laz (laspy), .txt/.xyz/.pts/.csv (x y z [r g b ...]), .npy ((N, 3) or
(N, 6)), a raw S3DIS room folder, a prepared Area_N.h5 (every room), or a folder of those (a raw S3DIS
root too: the rooms of its Area_N folders; other sub-folders are not searched, and a note names them and
the files of other kinds left out). Colours: 0..1, 0..255, or 16 bit (LAS or a 16-bit PLY type with a
value above 255; else when most non-zero values exceed 255 and some reach 511.5); a few above 255 are clipped,
with a note. In the --out folder itself, the files named as outputs,
*_pred.* and *_probs.npy, are not inputs. Outputs per scan, the formats --format lists (default npy,ply):
DIR/<name>_pred.npy (uint8 label per point), DIR/<name>_pred.ply (points coloured by class, a `pred`
property), .las (classification), .txt (x y z r g b label), .h5 (for `pointgeope viz`); with
--probabilities DIR/<name>_probs.npy (float32 (N, classes)). The rooms of an Area_N.h5, and the raw rooms found
inside a folder, go to DIR/Area_N/<room>_pred.* (named after the area file or the folder). One view unless
--tta or an eval.tta override (eval.tta.rotations=4) sets them, whatever the checkpoint's eval.tta (which
evaluate uses). The eval.* values are the checkpoint's, those its run was trained with, so that a fold folder
predicts as its .pt file does: of the fold's config.yaml, which evaluate reads, predict reads only
eval.checkpoint (the file to use), and a note names the eval.* it sets otherwise, with the overrides that
apply them. An input that fails is reported in one line and
the others are still predicted; the last line names the inputs that failed and the exit code is 2 when any
failed. Any file name works (non-ASCII, spaces, newlines). Stray points (finite coordinates too large for
float32, or farther than --max-extent, default 50 m, from the scan's median, after --scale) are left out
of the network's input and labelled as their nearest kept point, counted in one warning per scan that says
which --max-extent would keep them; a NaN or infinite coordinate is an error of the scan, naming the first
such point. A scan is voted on over at most --max-fragments voxel fragments (one pass over the scan each;
their number is the point count of the densest voxel, which repeated points make large): the
checkpoint's eval.max_fragments, or when that is null (every fragment, as the s3dis configs evaluate) 100; a
warning names the cap, the counts and how to lift it whenever one of these cuts a scan (not when --max-fragments
or an eval.max_fragments override chose it). Overrides of eval.* (and of how the prediction runs,
data.hierarchy and train.threads) may follow the inputs, as `evaluate` takes them, but not
eval.checkpoint (the option --checkpoint chooses a run folder's file).
Interrupted, the same command resumes: each scan's outputs end with DIR/<name>_pred.json, the record of what
made them (the checkpoint's and the input's sha256, the options that change the outputs, the code's
version and commit, each output's size and sha256); a rerun skips, in one line each, the scans whose
record matches and whose outputs are intact, and predicts the others again (--force: every scan).
--device and --batch-points do not count.
"""
from __future__ import annotations

import argparse

from pointgeope.commands import config_overrides, given, split_overrides
from pointgeope.constants import PREDICT_MAX_EXTENT, PREDICT_MAX_FRAGMENTS

FORMATS = ("npy", "ply", "las", "txt", "h5")  # pointgeope.scans.outputs.FORMATS (kept light to import)
HELP = "segment your own scans (ply, las, txt, npy, ...) with a trained model"


def _formats(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    unknown = [n for n in names if n not in FORMATS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated formats from {','.join(FORMATS)}, got {text!r}")
    return names


def _fragments(text: str) -> int | None:
    if text == "all":
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a number of fragments >= 1 or all, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model", metavar="MODEL", type=given,
                        help="a fold folder RUN/area_K (its last.pt, or eval.checkpoint) or a CHECKPOINT.pt")
    parser.add_argument("inputs", nargs="+", metavar="INPUT", type=given,
                        help="scan files or folders (see above), then any section.key=value overrides")
    parser.set_defaults(overrides=[])  # section.key=value after the options (commands.parse_args)
    parser.add_argument("--out", required=True, metavar="DIR", type=given, help="folder for the outputs")
    parser.add_argument("--format", type=_formats, default=("npy", "ply"), metavar="LIST",
                        help=f"the outputs to write, comma-separated from {','.join(FORMATS)} (default npy,ply; "
                             "--format h5 writes the .h5 only)")
    parser.add_argument("--probabilities", action="store_true",
                        help="also DIR/<name>_probs.npy: float32 (N, C) class probabilities (C = model.num_classes)")
    parser.add_argument("--force", action="store_true",
                        help="predict every scan again, even those whose outputs an earlier run completed")
    parser.add_argument("--checkpoint", choices=("last", "best"), help="which checkpoint of a run folder")
    parser.add_argument("--tta", action="store_true",
                        help="test-time views: the checkpoint's eval.tta, or 4 z-rotations x flip if it has none")
    parser.add_argument("--device", default="auto", help="auto (CUDA if present), cpu, cuda or cuda:N")
    parser.add_argument("--max-fragments", type=_fragments, default=False, metavar="N|all",
                        help="vote over at most N voxel fragments of a scan (default: the checkpoint's "
                             f"eval.max_fragments, or {PREDICT_MAX_FRAGMENTS} where that is null; a warning when "
                             "either cuts a scan)")
    parser.add_argument("--batch-points", type=int, default=None, metavar="N",
                        help="points per forward pass (default: the checkpoint's eval.batch_points)")
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiply coordinates by this to get metres (0.001 for mm, 0.3048 for feet)")
    parser.add_argument("--max-extent", type=float, default=PREDICT_MAX_EXTENT, metavar="M",
                        help="points farther than M metres from the scan's median (on an axis), or not finite "
                             "in float32, are left out of the network's input and labelled as their nearest "
                             f"kept point, with a warning (default {PREDICT_MAX_EXTENT:g}: S3DIS-sized rooms; raise it "
                             "to keep larger scans whole)")


def main(args: argparse.Namespace) -> int:
    from pointgeope.engine.predict import predict_scans

    args.inputs, overrides = split_overrides(args.inputs)
    args.overrides = config_overrides(overrides + list(args.overrides), {})  # a key twice: a warning
    return predict_scans(args)
