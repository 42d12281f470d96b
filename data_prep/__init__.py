"""Raw S3DIS -> prepared HDF5 (``pointgeope prepare``): source access, parsing, room assembly, writing."""
