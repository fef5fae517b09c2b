"""The real suite's time budgets (tests/real/budget.py), run by pytester on a small suite of
sleeping tests: a test or shared fixture over its budget fails naming both times, one with no
budget fails, a shared fixture's time is not its first user's, and every real test has one."""

from __future__ import annotations

import ast
import re
import subprocess
import textwrap
from pathlib import Path

import pytest

from devkit import realengine

from .conftest import ROOT
from .real import budget, disk, gate

pytest_plugins = ["pytester"]

SUITE = """
import time
import pytest

@pytest.fixture(scope="session")
def image():
    time.sleep(0.6)  # the shared build: its own budget, not its first user's
    return "built"

def test_quick(image):
    assert image == "built"

def test_slow():
    time.sleep(0.5)

@pytest.mark.parametrize("n", [1, 2])
def test_each(n):
    pass

def test_unlisted():
    pass
"""

BUDGETS = budget.Budgets(
    tests={
        "test_case.py::test_quick": 0.3,
        "test_case.py::test_slow": 0.2,
        "test_case.py::test_each": 5,
    },
    fixtures={"test_case.py::image": 5},
)


def run(pytester: pytest.Pytester, budgets: budget.Budgets) -> pytest.RunResult:
    pytester.syspathinsert()
    package = pytester.mkpydir("budgetcase")
    (package / "test_case.py").write_text(textwrap.dedent(SUITE))
    plugin = budget.Plugin(budgets, package="budgetcase.", folder="budgetcase/")
    return pytester.runpytest_inprocess("-p", "no:randomly", "-p", "no:xdist", plugins=[plugin])


def test_over_budget_and_unlisted_fail_naming_budget_and_time(pytester: pytest.Pytester) -> None:
    result = run(pytester, BUDGETS)
    result.assert_outcomes(passed=3, failed=2)
    result.stdout.re_match_lines(
        [r".*budgetcase/test_case.py::test_slow took 0\.[5-9] s, over its budget of 0\.2 s.*"]
    )
    result.stdout.fnmatch_lines(["*test_unlisted has no budget in tests/real/budgets.toml*"])


def test_a_shared_fixture_has_a_budget_of_its_own(pytester: pytest.Pytester) -> None:
    tight = budget.Budgets(tests=BUDGETS.tests, fixtures={"test_case.py::image": 0.1})
    result = run(pytester, tight)
    result.assert_outcomes(passed=2, failed=2, errors=1)
    result.stdout.fnmatch_lines(
        ["*the shared fixture test_case.py::image took 0.? s, over its budget of 0.1 s*"]
    )


def test_the_scale_multiplies_every_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(budget.SCALE_ENV, "2")
    loaded = budget.load()
    some = next(iter(loaded.tests))
    assert loaded.of_test(some) == 2 * loaded.tests[some]
    monkeypatch.setenv(budget.SCALE_ENV, "0.5")
    with pytest.raises(pytest.UsageError, match="below 1"):
        budget.load()


DISK_SUITE = """
def test_small():
    pass

def test_big():
    pass

def test_frees():
    pass
"""


@pytest.mark.parametrize(
    ("free_gb", "warned", "lowest"),
    [
        ([40, 39, 39, 20, 20, 30], False, "20.0 GB after diskcase/test_case.py::test_big"),
        ([40, 39, 39, 9, 9, 12], True, "9.0 GB after diskcase/test_case.py::test_big"),
        ([5, 39, 39, 20, 20, 30], True, "5.0 GB before diskcase/test_case.py::test_small"),
    ],
)
def test_the_disk_summary_names_the_lowest_point_and_what_used_the_most(
    pytester: pytest.Pytester, free_gb: list[int], warned: bool, lowest: str
) -> None:
    """Free space read before and after each test (then once at the end): the lowest point,
    before or after which test; the test that used most named first, one that freed space
    not named; the warning only under 10 GB."""
    readings = iter([n * 2**30 for n in free_gb] + [free_gb[-1] * 2**30])
    package = pytester.mkpydir("diskcase")
    (package / "test_case.py").write_text(textwrap.dedent(DISK_SUITE))
    plugin = disk.Plugin(read=lambda: next(readings), folder="diskcase/")
    result = pytester.runpytest_inprocess("-p", "no:randomly", "-p", "no:xdist", plugins=[plugin])
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        [
            f"disk (/var/lib): {free_gb[0]}.0 GB free at the start, lowest {lowest}, *",
            f"disk: *{39 - free_gb[3]}.0 GB used during diskcase/test_case.py::test_big",
        ]
    )
    assert "test_frees" not in result.stdout.str().split("free at the start")[1]
    assert ("BuildKit evicts its cache" in result.stdout.str()) is warned


def real_tests() -> set[str]:
    """file::function of every test function in tests/real."""
    found = set()
    for path in sorted((ROOT / "tests" / "real").glob("test_*.py")):
        tree = ast.parse(path.read_text())
        found |= {f"{path.name}::{node.name}" for node in tree.body
                  if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")}  # fmt: skip
    return found


def test_every_real_test_has_a_budget_and_every_budget_a_test() -> None:
    loaded = budget.load()
    listed = {key.split("[", 1)[0] for key in loaded.tests}
    assert real_tests() == listed


def collect(*args: str, where: tuple[str, ...] = ("tests/real",)) -> str:
    import subprocess
    import sys

    collected = subprocess.run(
        [sys.executable, "-m", "pytest", *args, *where],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert collected.returncode == 0, collected.stdout[-2000:] + collected.stderr[-2000:]
    return collected.stdout


def real_phase_markers() -> str:
    """The markers scripts/test-all.sh gives the real phase on the containerd store, whose
    `beside` tests it runs in processes of their own (beside it on two CPUs, after it on one)."""
    script = (ROOT / "scripts" / "test-all.sh").read_text()
    found = re.search(r'^on_engine containerd \S+ "\$\w+" "([^"]+)" beside$', script, re.M)
    assert found, "test-all.sh: no real phase on the containerd store with a beside phase"
    return found.group(1)


def beside_markers() -> str:
    """The markers scripts/test-beside.sh selects its tests by."""
    script = (ROOT / "scripts" / "test-beside.sh").read_text()
    found = re.search(r'^selected="([^"]+)"$', script, re.M)
    assert found, "test-beside.sh: no selected=... line"
    return found.group(1)


def collected_ids(*args: str, where: tuple[str, ...] = ("tests/real",)) -> list[str]:
    out = collect("--collect-only", "-q", *args, where=where)
    return [line for line in out.splitlines() if "::" in line]


@pytest.mark.subprocess
@pytest.mark.parametrize(("seed", "selected"), [(1, "docker"), (2, "CI")])
def test_the_cache_checks_come_first_and_the_tests_that_empty_it_last(
    seed: int, selected: str
) -> None:
    """In any random order, the tests that check BuildKit's cache first (test_rebuilds.py,
    all of it); the tests that install the whole venv uncached (`builds_cold`) after every
    other test but those that empty the cache; the registry-cache test (all of BuildKit's
    cache) second to last but the CUDA twins' tests, which come after it
    (tests/real/conftest.py); in CI's real phase, which leaves the `beside` tests to processes
    of their own, it is last."""
    markers = real_phase_markers() if selected == "CI" else selected
    ids = collected_ids(f"--randomly-seed={seed}", "-m", markers)
    assert len(ids) > 20, ids
    checks = collected_ids("-p", "no:randomly", "-m", f"({markers}) and {gate.MARK}")
    assert {i.split("::")[0] for i in checks} == {"tests/real/test_rebuilds.py"}
    assert len(checks) >= 5 and set(ids[: len(checks)]) == set(checks)
    cuda = [i for i in ids if i.startswith("tests/real/test_cuda_layer_shared.py::")]
    registry_cache = "test_a_registry_cache_lets_an_empty_builder_install_nothing_again"
    assert len(cuda) == (0 if selected == "CI" else 3)
    assert ids[len(ids) - len(cuda) :] == cuda
    assert ids[-len(cuda) - 1].endswith(registry_cache)
    # the cache-emptying tests are those two kinds (above): right before them, builds_cold
    cold = collected_ids("-p", "no:randomly", "-m", f"({markers}) and builds_cold")
    assert {i.split("::")[0] for i in cold} == {
        "tests/real/test_venv_layers.py",
        "tests/real/test_package_lock.py",
    }
    empties = len(cuda) + 1
    assert set(ids[len(ids) - empties - len(cold) : len(ids) - empties]) == set(cold)


@pytest.mark.parametrize(
    ("steps", "opened_after"),
    [
        # the session image built by a cache check, then the other checks, then the rest
        (["check", "built", "check", "check", "other", "other"], 4),
        # the session image first asked for after the checks
        (["check", "check", "other", "built", "other"], 3),
        # no cache check selected (a subset): open once the image is built
        (["other", "other", "built", "other"], 2),
        # nothing asks for the session image: test-all.sh starts them when pytest ends
        (["check", "other", "other"], None),
    ],
)
def test_the_beside_tests_start_once_the_image_is_built_and_the_cache_checked(
    tmp_path: Path, steps: list[str], opened_after: int | None
) -> None:
    """tests/real/gate.py: the file test-all.sh waits for is touched at the first moment the
    session image is built and no test that checks BuildKit's cache is left; not before."""
    ready = tmp_path / "ready"
    session = gate.Gate(ready)
    opened = None
    for n, step in enumerate(steps):
        if step == "built":
            session.session_built()
        else:
            session.test_starting(checks_cache=step == "check")
        if ready.exists() and opened is None:
            opened = n
            ready.unlink()  # touched once: not again by the tests after
    assert opened == opened_after and not ready.exists()
    gate.Gate(None).session_built()  # unset: nobody waits, nothing written


@pytest.mark.subprocess
def test_the_real_phase_and_its_beside_phase_run_every_real_test_once() -> None:
    """What test-all.sh's real phase selects from the whole suite (its pytest has no path:
    every test under tests/) and what scripts/test-beside.sh then runs are every real test,
    once (those marked `docker`, in tests/real and beside the unit tests), and no unit test."""
    # the whole suite collected once (the phase's pytest has no path); the real tests, and the
    # files with real tests outside tests/real, again by marker
    phase = set(collected_ids("-p", "no:randomly", "-m", real_phase_markers(), where=("tests",)))
    outside = {i.split("::")[0] for i in phase if not i.startswith("tests/real/")}
    files = ("tests/real", *sorted(outside))
    beside = set(collected_ids("-p", "no:randomly", "-m", beside_markers(), where=files))
    real = set(collected_ids("-p", "no:randomly", "-m", "docker", where=files))
    assert phase | beside == real and not phase & beside and beside


def beside_split() -> tuple[str, str]:
    """The markers test-all.sh's real phase runs while the `beside` tests run, and after
    them ($markers: the real phase's own)."""
    script = (ROOT / "scripts" / "test-all.sh").read_text()
    body = script[script.index("real_with_beside() {") :]
    body = body[: body.index("\n}\n")]
    found = re.findall(r'^  (?:\w+=\S+ )?real "\$name(?:-last)?" "\$limit" "([^"]+)"$', body, re.M)
    assert len(found) == 2, f"test-all.sh real_with_beside: two real runs, not {found}"
    return found[0], found[1]


@pytest.mark.subprocess
def test_beside_the_real_phase_the_tests_that_empty_the_cache_wait_for_the_beside_ones() -> None:
    """With two CPUs, the real phase's tests run while the `beside` ones do, but the one that
    empties all of BuildKit's cache: it runs after them, and the two runs are the phase."""
    during, after = (m.replace("$markers", real_phase_markers()) for m in beside_split())
    whole = set(collected_ids("-p", "no:randomly", "-m", real_phase_markers()))
    first = set(collected_ids("-p", "no:randomly", "-m", during))
    last = collected_ids("-p", "no:randomly", "-m", after)
    assert first | set(last) == whole and not first & set(last)
    assert [i.split("::")[1] for i in last] == [
        "test_a_registry_cache_lets_an_empty_builder_install_nothing_again"
    ]


@pytest.mark.subprocess
def test_the_tests_run_beside_each_other_share_no_fixture_of_the_suite() -> None:
    """scripts/test-beside.sh runs each `beside` test file in a process of its own, beside the
    real phase (one after another) or each other (after it):
    the arm64 path and the CUDA cells, and no shared fixture of tests/real/conftest.py but the
    Debian base (which each process finds made) and the cleanup after each file, so that
    neither waits on or disturbs the session image."""
    out = collect("--fixtures-per-test", "-q", "-p", "no:randomly", "-m", beside_markers())
    tests = re.findall(r"^- fixtures used by (\S+) -", out, re.M)
    assert {t.split("[")[0] for t in tests} == {
        "test_an_arm64_image_is_built_on_an_arm64_base_and_proven_arm64",
        "test_the_cuda_libraries_layers_are_the_same_layers_for_both_pythons",
        "test_torch_loads_its_cuda_libraries_through_the_links",
    }
    shared = set(re.findall(r"^(\w+) -- tests/real/conftest\.py:", out, re.M))
    # and the file's cleanup, which removes only what its own process built
    assert shared == {"debian_bookworm", "images_made_removed"}


def test_the_beside_tests_empty_none_of_the_cache_that_other_processes_build_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """scripts/test-beside.sh marks the engine shared; there the cache mounts are left and
    emptying all of the cache fails (a prune of the cache mounts alone left every build's
    steps uncached, and a real-phase test that builds twice failed between its builds: CI,
    2026-11-29). Every prune of the real tests goes through those two helpers."""
    script = (ROOT / "scripts" / "test-beside.sh").read_text()
    assert re.search(rf"^export {realengine.SHARED_ENV}=1$", script, re.M)
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(realengine, "docker", lambda *args, **kw: calls.append(args))
    monkeypatch.setenv(realengine.SHARED_ENV, "1")
    assert realengine.engine_shared()
    realengine.free_cache_mounts()
    with pytest.raises(pytest.fail.Exception, match="empties BuildKit's cache"):
        realengine.prune_build_cache()
    assert calls == []
    monkeypatch.delenv(realengine.SHARED_ENV)
    assert not realengine.engine_shared()
    realengine.free_cache_mounts()
    realengine.prune_build_cache()
    assert calls == [
        ("builder", "prune", "-f", "--filter", "type=exec.cachemount"),
        ("builder", "prune", "-af"),
    ]
    for path in sorted((ROOT / "tests" / "real").glob("*.py")):
        assert '"builder", "prune"' not in path.read_text(), path.name


STUB_PYTHON = """#!/usr/bin/env bash
# stands in for `python -m pytest`: lists two files, or records when a file's run starts and ends
case " $* " in
  *" --collect-only "*) printf 'tests/real/a.py::t\\ntests/real/b.py::t\\n' ;;
  *) echo "start ${*: -1}" >>"$RUNS"; sleep 1; echo "end ${*: -1}" >>"$RUNS" ;;
esac
"""


def beside_runs(tmp_path: Path, serial: str | None) -> list[str]:
    """scripts/test-beside.sh run with a stand-in for python: what started and ended, in order."""
    stub = tmp_path / "bin" / "python"
    stub.parent.mkdir(parents=True)
    stub.write_text(STUB_PYTHON)
    stub.chmod(0o755)
    runs = tmp_path / "runs"
    env = {"PATH": f"{stub.parent}:/usr/bin:/bin", "RUNS": str(runs), "TMPDIR": str(tmp_path)}
    if serial is not None:
        env["IMAGEKIT_TEST_BESIDE_SERIAL"] = serial
    script = ROOT / "scripts" / "test-beside.sh"
    done = subprocess.run(
        ["bash", str(script)], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [
        line.replace("tests/real/", "").removesuffix(".py")
        for line in runs.read_text().splitlines()
    ]


@pytest.mark.subprocess
def test_the_beside_files_run_one_after_another_during_the_real_phase(tmp_path: Path) -> None:
    """During the real phase (test-all.sh sets IMAGEKIT_TEST_BESIDE_SERIAL=1) the `beside`
    files run one after another: with the real phase's own tests, two busy processes on two
    CPUs, not three. After it, all at once."""
    during = beside_runs(tmp_path / "during", "1")
    assert during == ["start a", "end a", "start b", "end b"]
    after = beside_runs(tmp_path / "after", None)
    assert sorted(after[:2]) == ["start a", "start b"] and sorted(after[2:]) == ["end a", "end b"]
    script = (ROOT / "scripts" / "test-all.sh").read_text()
    assert "IMAGEKIT_TEST_BESIDE_SERIAL=1 exec timeout" in script
