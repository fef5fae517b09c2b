"""The floor bench's regression check: each ratio compared in its own direction."""

from __future__ import annotations

import pytest

from bench.regression import LOWER_IS_BETTER, compare, regressed, verdict


@pytest.mark.parametrize(
    ("key", "last", "now", "expected"),
    [
        ("build_over_floor", 2.0, 2.5, "REGRESSED"),  # lower is better: higher is worse
        ("build_over_floor", 2.0, 1.5, "better"),
        ("build_over_floor", 2.0, 2.2, "ok"),  # +10% within 15%
        ("twin_ratio", 1.4, 1.7, "REGRESSED"),
        ("handwritten_over_imagekit_cold", 1.2, 0.9, "REGRESSED"),  # higher is better
        ("handwritten_over_imagekit_cold", 1.0, 1.3, "better"),
        ("handwritten_over_imagekit_w1", 3.0, 2.8, "ok"),
        ("pyc_start_speedup", 4.0, 2.0, "REGRESSED"),
    ],
)
def test_verdict_reads_each_ratio_in_its_direction(
    key: str, last: float, now: float, expected: str
) -> None:
    assert verdict(key, last, now, 0.15).verdict == expected


def test_change_is_relative_to_the_last_value() -> None:
    row = verdict("build_over_floor", 2.0, 2.5, 0.15)
    assert row.change == pytest.approx(0.25)


def test_the_tolerance_decides() -> None:
    assert verdict("build_over_floor", 2.0, 2.5, 0.30).verdict == "ok"
    assert verdict("build_over_floor", 2.0, 2.5, 0.20).verdict == "REGRESSED"


def test_missing_values_are_not_compared() -> None:
    rows = compare({"build_over_floor": 2.0}, {"twin_ratio": 1.3, "build_over_floor": None})
    assert [row.ratio for row in rows] == list(LOWER_IS_BETTER)
    assert {row.verdict for row in rows} == {"n/a"}
    assert not regressed(rows)


def test_compare_flags_a_regression_among_the_ratios() -> None:
    last = {"build_over_floor": 2.0, "handwritten_over_imagekit_cold": 1.0}
    now = {"build_over_floor": 1.9, "handwritten_over_imagekit_cold": 0.5}
    rows = {row.ratio: row.verdict for row in compare(last, now)}
    assert rows["build_over_floor"] == "ok"
    assert rows["handwritten_over_imagekit_cold"] == "REGRESSED"
    assert regressed(compare(last, now))
