"""A synthetic S3DIS (``pointgeope synth``): rooms in the raw layout of Stanford3dDataset_v1.2_Aligned_Version.

Used by the tests and the demo, since the real S3DIS cannot be fetched. The modules, from the settings
down to the bytes written::

    config.py     SynthConfig (areas, rooms, density, noise, seed, defects) and the --size presets
    dataset.py    generate(): every area and room, resumable, then OUT/synth_manifest.json
    rooms.py      layouts of offices, conference rooms and hallways
    objects.py    furniture and building parts, each in its own local frame
    geometry.py   surfaces as parallelograms, placed and sampled uniformly, occlusion
    write.py      the "x y z r g b" text files, written fast and atomically, with planted defects

The prepare pipeline (``data_prep/prepare.py`` and its modules) never imports this package.
"""
