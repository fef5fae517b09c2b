"""One exception type per exit code (the codes: contract/exits.py). Only the CLI turns them
into exits."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from imagekit.contract import exits
from imagekit.contract.text import escape


class ImagekitError(Exception):
    """Base: a failure the user can act on. `exit_code` is what the CLI exits with.

    `message` is one line; `details` are the lines under it (a log's tail, a diff, a list).
    Each is one line wherever it is shown: a newline inside one is a value's, and shows
    as `\\n` (imagekit/terminal.py)."""

    exit_code = exits.FAILURE

    def __init__(self, message: str = "", *details: str) -> None:
        super().__init__(message)
        self.lines = [message, *details]

    def __str__(self) -> str:
        return "\n".join(self.lines)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with the user's input, as a record: where, which field, which value,
    what is wrong and what would be right. The CLI prints it; CI turns it into an annotation."""

    message: str
    file: str | None = None
    line: int | None = None
    field: str | None = None
    value: str | None = None  # as shown to the user (repr, credentials masked)

    def __str__(self) -> str:
        # a file name's control characters escaped: a newline in it would otherwise start a
        # line (and a CI workflow command) of its own
        where = ":".join(escape(str(p)) for p in (self.file, self.line) if p is not None)
        parts = [p for p in (where, self.field) if p]
        if self.value is not None:
            parts.append(f"value {self.value}")
        return ": ".join([*parts, self.message])

    def annotation(self) -> str:
        """A GitHub Actions workflow command: the problem shows on the file's line. Escaped
        as @actions/core escapes, so no value can end the command or start another."""
        props = ",".join(
            f"{key}={escape_property(str(value))}"
            for key, value in (("file", self.file), ("line", self.line))
            if value
        )
        text = escape_data(": ".join(p for p in (self.field, self.message) if p))
        return f"::error {props}::{text}" if props else f"::error::{text}"


def escape_data(text: str) -> str:
    """The message of a workflow command (@actions/core's escapeData)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A property value of a workflow command (@actions/core's escapeProperty)."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


class SpecError(ImagekitError):
    """The matrix files are invalid. Carries every problem found, not just the first."""

    exit_code = exits.USAGE

    def __init__(self, problems: Sequence[Problem | str]) -> None:
        self.records = [p if isinstance(p, Problem) else Problem(message=p) for p in problems]
        self.problems = [str(p) for p in self.records]
        count = len(self.problems)
        head = f"{count} problem{'s' if count != 1 else ''} in the matrix:"
        super().__init__(head, *(f"  - {p}" for p in self.problems))


class UsageError(ImagekitError):
    """Bad command-line input (a path that does not exist, a filter that selects nothing)."""

    exit_code = exits.USAGE


class CompatError(ImagekitError):
    """A CUDA / torch / Python / OS combination that does not exist."""

    exit_code = exits.COMPAT


class StaleError(ImagekitError):
    """Committed Dockerfiles differ from what the matrix renders (`render --check`)."""

    exit_code = exits.STALE


class EngineError(ImagekitError):
    """The Docker engine, CLI or BuildKit is missing, too old or unreachable."""

    exit_code = exits.ENGINE


class BuildError(ImagekitError):
    """One or more cells failed to build (or went over their size budget)."""

    exit_code = exits.BUILD


class PushError(ImagekitError):
    """A push to the registry failed; the local image is kept."""

    exit_code = exits.PUSH


class SelfCheckFailed(ImagekitError):
    """The self-check ran and at least one check failed. `report` is its output's lines, which
    the CLI prints before the one-line error."""

    exit_code = exits.SELFCHECK

    def __init__(self, message: str, report: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.report = list(report)


class Interrupted(ImagekitError):
    """Ctrl-C: builds were stopped and their tags removed."""

    exit_code = exits.INTERRUPTED
