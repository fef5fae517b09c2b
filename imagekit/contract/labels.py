"""The io.imagekit.* image labels: written by the host (matrix/cells.py at render, the
self-check stamp, `imagekit test --nodes` on its containers), read in the image
(/etc/imagekit/labels.json) by the self-check and the entrypoint's forward-compat step."""

from __future__ import annotations

PREFIX = "io.imagekit."

# What the image is and promises (every cell's Dockerfile, matrix/cells.py).
CELL = "io.imagekit.cell"
CUDA = "io.imagekit.cuda"  # "cpu" for CPU-only cells
TORCH = "io.imagekit.torch"
PYTHON = "io.imagekit.python"
OS = "io.imagekit.os"
FLAVOR = "io.imagekit.flavor"
VARIANT = "io.imagekit.variant"
FEATURES = "io.imagekit.features"  # comma list
COMPILE = "io.imagekit.compile"  # "true" | "false"
PROFILE = "io.imagekit.profile"  # the NCCL profile (matrix/profiles.py)
ARCHS = "io.imagekit.archs"  # space list
MIN_DRIVER = "io.imagekit.min-driver"
FORWARD_BRANCHES = "io.imagekit.forward-branches"  # space list of driver branches
VERSION = "io.imagekit.version"  # the imagekit that rendered it

# What `imagekit test --stamp` adds to the validated tag.
VALIDATED = "io.imagekit.validated"
VALIDATED_AT = "io.imagekit.validated.at"
VALIDATED_ON = "io.imagekit.validated.on"
SELFCHECK = "io.imagekit.selfcheck"  # JSON: check -> status

# Container labels of `imagekit test --nodes`, so a later run finds and removes leftovers.
RUN = "io.imagekit.run"
RUN_OWNER = "io.imagekit.run.owner"  # host:pid of the imagekit process that made it
NODE = "io.imagekit.node"
