"""python -m imagekit.selfcheck: the door the host and launch files call; the run is run/main.py."""

import sys

from imagekit.selfcheck.run.main import main

if __name__ == "__main__":
    sys.exit(main())
