"""python -m imagekit.selfcheck.nodes_check: the door torchrun starts on every node (one
process a rank); the check itself is probes/nodes.py."""

import os
import sys

from imagekit.selfcheck.probes.nodes import main

if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # No interpreter teardown: with 2+ ranks a node, torch's C++ threads sometimes abort the
    # exiting process (SIGABRT, "terminate called without an active exception") after the
    # check passed and the report was written, failing a good run. The work is done here.
    os._exit(code)
