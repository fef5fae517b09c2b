"""python -m imagekit.selfcheck.failures REPORT.json: the door a Slurm preflight calls for its
drain reason; the line itself is run/failure_line.py."""

import sys

from imagekit.selfcheck.run.failure_line import main

if __name__ == "__main__":
    sys.exit(main())
