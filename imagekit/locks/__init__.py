"""Locks beside the matrix: images.lock (base image digests, images.py; the cells pinned by it,
pinned.py) and packages.lock (each cell's Python packages with hashes: packages.py, its file
format in package_file.py, resolved by resolving.py)."""
