"""One line that names a self-check run's failed checks and the first one's reason, from the
run's JSON: what a node that failed `imagekit launch --drain-on-fail`'s preflight gives Slurm
as its drain reason. Standard library only.

    python -m imagekit.selfcheck.failures REPORT.json
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from imagekit.contract import exits
from imagekit.contract.checks import RecordError, results_from_report

# Slurm keeps a node's reason as free text, but it travels through scontrol's KEY=VALUE
# arguments and the job's shell: letters, digits and plain punctuation only.
UNSAFE = re.compile(r"[^A-Za-z0-9 .,:;()/_+-]+")
LIMIT = 180  # the drain reason is "imagekit preflight: " and this, at most 200 characters


def sanitized(text: str, limit: int = LIMIT) -> str:
    return " ".join(UNSAFE.sub(" ", text).split())[:limit].rstrip()


def one_line(report: object, limit: int = LIMIT) -> str:
    """e.g. "ddp,links failed: ddp: rank 1 died with exit code 3"."""
    try:
        failed = [c for c in results_from_report(report) if c.failed]
    except RecordError as exc:
        return sanitized(f"the self-check's report is not one: {exc}", limit)
    if not failed:
        return "the self-check failed, no check in its report did"
    names = ",".join(c.name or "?" for c in failed)
    first = failed[0]
    reason = first.reason or "no reason given"
    return sanitized(f"{names} failed: {first.name or '?'}: {reason}", limit)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m imagekit.selfcheck.failures REPORT.json", file=sys.stderr)
        return exits.CHECK_USAGE
    print(one_line(json.loads(Path(args[0]).read_text())))
    return exits.CHECK_PASSED
