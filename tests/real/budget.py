"""Each real test's time budget (tests/real/budgets.toml), enforced by tests/real/conftest.py.

A test's own time is its setup, call and teardown, less the shared fixtures (session- and
module-scoped: a built image, a bootstrapped base) that its setup happened to make first: in a
random order that is whichever test asks first, so a shared fixture is timed and budgeted on
its own. A test or shared fixture over its budget fails, naming the budget and its time; one
with no budget fails too, so every new real test says what it costs."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

try:  # Python 3.11 on; tomli is the same module for 3.10
    import tomllib
except ModuleNotFoundError:  # pragma: no cover
    import tomli as tomllib  # type: ignore[no-redef,import-not-found,unused-ignore]

FILE = Path(__file__).with_name("budgets.toml")
WHERE = "tests/real/budgets.toml"
NAME = "imagekit-real-budgets"
SCALE_ENV = "IMAGEKIT_TEST_BUDGET_SCALE"  # e.g. 2 under emulation; never to hide a slow test


@dataclass
class Budgets:
    tests: dict[str, float]
    fixtures: dict[str, float]
    scale: float = 1.0

    def of_test(self, key: str) -> float | None:
        """The budget of `f.py::test_x[param]`: its own line, else its function's."""
        found = self.tests.get(key, self.tests.get(key.split("[", 1)[0]))
        return None if found is None else found * self.scale

    def of_fixture(self, name: str) -> float | None:
        found = self.fixtures.get(name)
        return None if found is None else found * self.scale


def load() -> Budgets:
    data = tomllib.loads(FILE.read_text(encoding="utf-8"))
    raw = os.environ.get(SCALE_ENV, "1")
    try:
        scale = float(raw)
    except ValueError:
        raise pytest.UsageError(f"{SCALE_ENV}={raw!r}: not a number (e.g. 2)") from None
    if scale < 1:
        raise pytest.UsageError(f"{SCALE_ENV}={raw!r}: a scale below 1 would fail healthy tests")
    return Budgets(
        tests={k: float(v) for k, v in data.get("tests", {}).items()},
        fixtures={k: float(v) for k, v in data.get("fixtures", {}).items()},
        scale=scale,
    )


def over(what: str, seconds: float, budget: float | None) -> str | None:
    """Why `what` fails its budget, or None when it kept to it."""
    if budget is None:
        return f"{what} has no budget in {WHERE}: add one (seconds, about three times its time)"
    if seconds > budget:
        return (
            f"{what} took {seconds:.1f} s, over its budget of {budget:.1f} s ({WHERE}): "
            "find what slowed it before raising the budget"
        )
    return None


def shared_key(fixturedef: pytest.FixtureDef[object], package: str) -> str | None:
    """A shared fixture of this suite's own (defined in `package`), by name (`project`), or by
    file and name where a test file defines it (`test_layers_and_push.py::project`); None for
    the others."""
    module = getattr(fixturedef.func, "__module__", "")
    if fixturedef.scope == "function" or not module.startswith(package):
        return None
    file = module.rsplit(".", 1)[1]
    return fixturedef.argname if file == "conftest" else f"{file}.py::{fixturedef.argname}"


class Plugin:
    """Times every real test and shared fixture against its budget (registered by
    tests/real/conftest.py, so it sees the session's fixtures too)."""

    def __init__(self, budgets: Budgets, package: str = "tests.real.", folder: str = "tests/real/"):
        self.budgets, self.package, self.folder = budgets, package, folder
        self.shared_in_setup = 0.0  # the shared fixtures made during the current test's setup
        self.spent: dict[str, float] = {}  # each of those fixtures -> seconds
        self.setup_seconds: dict[str, float] = {}

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(
        self, fixturedef: pytest.FixtureDef[object], request: pytest.FixtureRequest
    ) -> object:
        key = shared_key(fixturedef, self.package)
        if key is None:
            return (yield)
        started = time.monotonic()
        try:
            return (yield)
        finally:
            took = time.monotonic() - started
            self.shared_in_setup += took
            self.spent[key] = self.spent.get(key, 0.0) + took

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> pytest.TestReport:
        report: pytest.TestReport = yield
        if not item.nodeid.startswith(self.folder) or not report.passed:
            return report
        if report.when == "setup":
            problems = [
                over(f"the shared fixture {key}", seconds, self.budgets.of_fixture(key))
                for key, seconds in self.spent.items()
            ]
            self.spent.clear()
            self.setup_seconds[item.nodeid] = report.duration - self.shared_in_setup
            self.shared_in_setup = 0.0
            fail(report, [p for p in problems if p])
        elif report.when == "call":
            own = self.setup_seconds.pop(item.nodeid, 0.0) + report.duration
            key = item.nodeid.removeprefix(self.folder)
            problem = over(item.nodeid, own, self.budgets.of_test(key))
            fail(report, [problem] if problem else [])
        return report


def fail(report: pytest.TestReport, problems: list[str]) -> None:
    if problems:
        report.outcome = "failed"
        report.longrepr = "\n".join(problems)
