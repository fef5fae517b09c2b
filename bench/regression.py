"""The floor bench's regression check (issue 54): this run's ratios against the last recorded
run's (bench/results/floor-<engine>.json), each with the direction that is worse for it.

`compare` is pure (unit-tested in tests/test_bench_regression.py); `print_rows` prints its
table: ratio, last, now, change %, verdict (ok / better / REGRESSED / n/a).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass

# each ratio the check reads, and whether a lower value is the better one
LOWER_IS_BETTER: dict[str, bool] = {
    "build_push_over_serial_floor": True,
    "build_over_floor": True,
    "build_minus_unpack_over_floor": True,
    "twin_ratio": True,
    "handwritten_over_imagekit_cold": False,  # the hand-written build's time over imagekit's
    "handwritten_over_imagekit_w1": False,
    "handwritten_over_imagekit_w2": False,
    "pyc_start_speedup": False,  # first `import torch` without bytecode over with it
}
DEFAULT_TOLERANCE = 0.15


@dataclass(frozen=True)
class Row:
    """One ratio's comparison: change is (now - last) / last, None where either is missing."""

    ratio: str
    last: float | None
    now: float | None
    change: float | None
    verdict: str  # ok | better | REGRESSED | n/a


def verdict(key: str, last: float | None, now: float | None, tolerance: float) -> Row:
    """One ratio against its last value: worse by more than `tolerance` (relative) in its own
    direction is REGRESSED, better by more than it is better, else ok."""
    if last is None or now is None or last == 0:
        return Row(key, last, now, None, "n/a")
    change = (now - last) / abs(last)
    worse = change if LOWER_IS_BETTER[key] else -change
    if worse > tolerance:
        return Row(key, last, now, change, "REGRESSED")
    if worse < -tolerance:
        return Row(key, last, now, change, "better")
    return Row(key, last, now, change, "ok")


def compare(
    last: Mapping[str, float | None],
    now: Mapping[str, float | None],
    tolerance: float = DEFAULT_TOLERANCE,
) -> list[Row]:
    """Every ratio of LOWER_IS_BETTER, in its order: the last run's value against this one's."""
    return [verdict(key, last.get(key), now.get(key), tolerance) for key in LOWER_IS_BETTER]


def regressed(rows: list[Row]) -> bool:
    return any(row.verdict == "REGRESSED" for row in rows)


def as_json(rows: list[Row]) -> list[dict[str, object]]:
    return [asdict(row) for row in rows]


def print_rows(rows: list[Row], tolerance: float, last_date: str | None) -> None:
    """The table: ratio, last, now, change %, verdict."""
    print(f"regression check against the last run ({last_date or 'none recorded'}), "
          f"tolerance {tolerance:.0%}:")  # fmt: skip
    print(f"  {'ratio':<34}{'last':>8}{'now':>8}{'change':>9}  verdict")

    def number(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    for row in rows:
        change = "-" if row.change is None else f"{row.change:+.0%}"
        line = f"{row.ratio:<34}{number(row.last):>8}{number(row.now):>8}{change:>9}"
        print(f"  {line}  {row.verdict}")
