"""Users' own scans: reading point clouds of common formats, and writing predictions in them.

This package sits at the data end of the pipeline (beside ``data_prep``): the engine's ``predict`` uses
it, the model never imports it.

    scan.py     the Scan (points in file order), ScanError, checks shared by every reader
    sources.py  which scans an input names (file, folder, raw S3DIS room, prepared Area_N.h5) and reading them
    ply.py      PLY (ascii and binary) reader, binary PLY writer
    text.py     x y z [r g b ...] text (.txt .xyz .pts .csv) reader and writer
    las.py      LAS / LAZ through laspy (optional: pip install "pointgeope[las]")
    outputs.py  the prediction files of one scan (npy, ply, las, txt, probabilities, h5 for the viewer)
"""
