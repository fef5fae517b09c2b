"""One exception type per exit code. Only the CLI turns them into exits."""

from __future__ import annotations


class ImagekitError(Exception):
    """Base: a failure the user can act on. `exit_code` is what the CLI exits with."""

    exit_code = 1


class SpecError(ImagekitError):
    """The matrix files are invalid. Carries every problem found, not just the first."""

    exit_code = 2

    def __init__(self, problems: list[str]) -> None:
        self.problems = list(problems)
        count = len(self.problems)
        head = f"{count} problem{'s' if count != 1 else ''} in the matrix:"
        super().__init__("\n".join([head, *(f"  - {p}" for p in self.problems)]))


class UsageError(ImagekitError):
    """Bad command-line input (a path that does not exist, a filter that selects nothing)."""

    exit_code = 2


class CompatError(ImagekitError):
    """A CUDA / torch / Python / OS combination that does not exist."""

    exit_code = 3


class StaleError(ImagekitError):
    """Committed Dockerfiles differ from what the matrix renders (`render --check`)."""

    exit_code = 4


class EngineError(ImagekitError):
    """The Docker engine, CLI or BuildKit is missing, too old or unreachable."""

    exit_code = 5


class BuildError(ImagekitError):
    """One or more cells failed to build (or went over their size budget)."""

    exit_code = 6


class PushError(ImagekitError):
    """A push to the registry failed; the local image is kept."""

    exit_code = 7


class SelfCheckFailed(ImagekitError):
    """The self-check ran and at least one check failed. `report` is its output, which the
    CLI prints before the one-line error."""

    exit_code = 8

    def __init__(self, message: str, report: str = "") -> None:
        super().__init__(message)
        self.report = report


class Interrupted(ImagekitError):
    """Ctrl-C: builds were stopped and their tags removed."""

    exit_code = 130
