"""Locks beside the matrix: images.lock (base image digests, images.py) and packages.lock
(each cell's Python packages with hashes: packages.py, its file format in package_file.py)."""
