"""python -m imagekit.selfcheck: prove this image's stack on the hardware it runs on.

Exit 0 only when no check failed. A skip always says why; --require turns skips of the
named things into failures, and features the image's labels promise are required too.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from datetime import datetime, timezone
from pathlib import Path

from imagekit import __version__
from imagekit.selfcheck import report, runner
from imagekit.selfcheck.results import labels


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m imagekit.selfcheck",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--checks",
        default=",".join(runner.ORDER),
        help=f"comma list, from: {', '.join(runner.ORDER)}",
    )
    parser.add_argument(
        "--require", default="", help=f"comma list, from: {', '.join(runner.REQUIREMENTS)}"
    )
    parser.add_argument(
        "--timeout",
        type=float,
        default=float(os.environ.get("IMAGEKIT_SELFCHECK_TIMEOUT", 0)) or None,
        help="seconds per check before it is killed and reported as timed out "
        "(default: each check's own limit)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=max(2, min(4, len(os.sched_getaffinity(0)))),
        help="functional checks run side by side; the timed ones (amp, flash, perf) alone",
    )
    parser.add_argument("--json", type=Path, help="write the results as JSON")
    parser.add_argument("--junit", type=Path, help="write the results as JUnit XML")
    args = parser.parse_args(argv)
    unknown = set(filter(None, args.checks.split(","))) - set(runner.ORDER)
    unknown |= set(filter(None, args.require.split(","))) - set(runner.REQUIREMENTS)
    if unknown:
        parser.error(f"unknown check or requirement: {', '.join(sorted(unknown))}")
    return args


def _progress(name: str, result: dict) -> None:  # type: ignore[type-arg]
    print(f"  {name}: {result['status']} ({result['seconds']}s)", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    names = [n for n in runner.ORDER if n in args.checks.split(",")]
    results = runner.run_all(names, args.timeout, args.jobs, _progress)
    promised = labels()
    gpu = bool(results.get("stack", {}).get("measurements", {}).get("gpu"))
    need = runner.required(set(filter(None, args.require.split(","))), promised, gpu)
    runner.apply_requirements(results, need)
    print(report.table(results))
    context = {
        "imagekit": __version__,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "python": platform.python_version(),
        "labels": promised,
        "required": sorted(need),
    }
    if args.json:
        args.json.write_text(report.to_json(results, context) + "\n")
    if args.junit:
        args.junit.write_text(report.to_junit(results) + "\n")
    return runner.exit_code(results)


if __name__ == "__main__":
    sys.exit(main())
