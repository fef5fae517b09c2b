"""Every exit code imagekit and the image's programs end with, defined once.

The CLI's codes (errors.py gives each ImagekitError subclass one) are what CI scripts and
docs/cli.md's exit-code table branch on. The self-check's (`python -m imagekit.selfcheck`, the
multi-node rank program, the drain-reason helper) are read by the host: `imagekit test`
treats anything but CHECK_PASSED as a failed image, and the launch scripts' preflight
drains a node on it. The build helpers copied into the build context as single files
(buildtime/groups.py, pyc_cache.py, venv_delta.py) run in the builder without this package and
keep their own plain 0 / 2 (usage), which match USAGE here.
"""

from __future__ import annotations

# -- the imagekit CLI ----------------------------------------------------------------------
OK = 0
FAILURE = 1  # an ImagekitError without a more specific code
USAGE = 2  # bad command-line input or an invalid matrix (SpecError, UsageError, click's own)
COMPAT = 3  # a CUDA / torch / Python / OS combination that does not exist
STALE = 4  # committed Dockerfiles or package locks differ from what the matrix renders
ENGINE = 5  # the Docker engine, CLI or BuildKit is missing, too old or unreachable
BUILD = 6  # a cell failed to build, or went over its size budget
PUSH = 7  # a push to the registry failed
SELFCHECK = 8  # the image's self-check ran and a check failed
RESOLVE = 9  # a package index could not be reached, or requirements cannot be resolved
INTERNAL = 70  # a bug: EX_SOFTWARE of sysexits.h; the traceback goes to a crash log
INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, as a shell reports it

# -- inside the image: the self-check and its helpers ----------------------------------------
CHECK_PASSED = 0  # no check failed (skips say why, and --require turns them into failures)
CHECK_FAILED = 1  # at least one check failed
CHECK_USAGE = 2  # it could not run: a bad snapshot for --judge, not started by torchrun, usage
