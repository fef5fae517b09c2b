"""Hostile inputs, third round: no raw control character from a value reaches any output.

Every value from a user, a file or the environment (paths, matrix values, file names, image
references, a container's log lines and report, BuildKit's log, labels read from an image)
is shown escaped on stdout and stderr: in errors, warnings, tables, progress lines, reports
and crash logs. One writer does it (imagekit/terminal.py); a test holds every other module
to it, and a property test sends generated values through each entry point under
GITHUB_ACTIONS=true and reads what came out.
"""

from __future__ import annotations

import ast
import json
import os
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imagekit import terminal
from imagekit.contract.text import escape, shown
from imagekit.engine.fake import FakeEngine
from imagekit.engine.interface import BuildRequest, BuildResult, LineSink, RunOptions, RunResult
from imagekit.errors import BuildError

from .hostile import Ran, project, run  # noqa: F401 - project is a fixture
from .test_packagelock import CELL
from .test_selfcheck_logic import SelfcheckEngine

PACKAGE = Path(__file__).resolve().parents[1] / "imagekit"
MARK = "::notice title=INJECTED::y"

# What a value may hold to start a line or move the cursor: line breaks of every kind,
# carriage returns, ANSI escape and control sequences (CSI, OSC), backspace, bell, DEL, C1
# controls, bidirectional overrides. NUL cannot travel in argv or the environment.
CONTROLS = [
    "",  # the value starts the line: a path such as `::notice::x/images.lock`
    "\n",
    "\r",
    "\r\n",
    "\x0b",
    "\x0c",
    "\x1b[2K\r",
    "\x1b]8;;x\x07",
    "\x08\x08",
    "\x07",
    "\x7f",
    "\x85",
    "\x9b31m",
    "\u2028",
    "\u2029",
    "\u202e",
    "\t",
]
values = st.builds(
    lambda before, control, after: f"{before}{control}{MARK}{after}",
    st.sampled_from(["", "x", "12.6", "a b", "##[error]"]),
    st.sampled_from(CONTROLS),
    st.sampled_from(["", "\n", "\x1b[0m", " tail"]),
)


def assert_clean(text: str, where: str = "output") -> None:
    """No character but a newline is unprintable, and no line starts with the injected
    workflow command (GitHub trims a line's leading spaces before it reads one)."""
    bad = [c for c in text if not c.isprintable() and c != "\n"]
    assert not bad, f"{where} holds raw {bad!r}: {text!r}"
    for line in text.split("\n"):
        assert not line.lstrip().startswith("::notice"), f"{where}: a value started {line!r}"
        # imagekit's own annotation is one command, read whole (the runner tries `::` first)
        if not line.startswith("::error "):
            assert "##[" not in line, f"{where}: a legacy workflow command: {line!r}"


def assert_shown(ran: Ran, value: str) -> None:
    """The value is there, escaped: the user sees what they gave."""
    assert_clean(ran.out, "stdout")
    assert_clean(ran.err, "stderr")
    assert escape(MARK)[1:] in ran.text, ran  # its first colon escaped where it starts a line


# --- the one writer --------------------------------------------------------------------


def test_a_value_that_starts_a_line_is_no_workflow_command() -> None:
    # GitHub reads `::name::` at a line's start, leading spaces trimmed, and `##[` anywhere
    assert terminal.render(["::notice::a", "  ::error::b", "x ##[error]c"]) == (
        "\\x3a:notice::a\n  \\x3a:error::b\nx #\\x23[error]c"
    )
    assert terminal.render(terminal.render("::notice::a")) == "\\x3a:notice::a"  # idempotent


def test_click_shows_imagekits_own_words_on_their_lines(
    capsys: pytest.CaptureFixture[str],
) -> None:
    bare = run(capsys, "compat")
    assert bare.code == 2 and "Commands:" in bare.err.splitlines() and "\\n" not in bare.err
    missing = run(capsys, "launch", "--", "x")
    assert missing.err.splitlines()[-3:] == [
        "Error: Missing option '--scheduler'. Choose from:",
        "    kubernetes,",
        "    slurm",
    ]


def test_a_line_is_escaped_whole_and_lines_are_imagekits_own() -> None:
    assert terminal.render(["a\nb", "c\x1b[2Kd"]) == "a\\nb\nc\\x1b[2Kd"
    assert terminal.render("one\rline") == "one\\rline"
    assert terminal.foreign("ok\n::error::x\r\n") == ["  | ok", "  | ::error::x\r"]
    assert terminal.render(terminal.foreign(["a\nb"])) == "  | a\n  | b"


@given(st.text())
def test_escape_leaves_nothing_unprintable_and_is_idempotent(text: str) -> None:
    escaped = escape(text)
    assert escaped.isprintable() and escape(escaped) == escaped
    if text.isprintable():
        assert escaped == text
    once = shown(text)
    assert once.isprintable() and shown(once) == once and "##[" not in once
    assert not once.lstrip().startswith("::")


WRITERS = {"print", "echo", "secho"}  # and .write/.writelines on stdout or stderr
# (file, function) pairs allowed to write, and why
ALLOWED = {
    ("terminal.py", "echo"): "the one writer",
    ("text_table.py", "render_table"): "rich lays the table out into a StringIO",
    ("builder/display.py", "message"): "a live display prints terminal.rich_text",
}
IN_IMAGE = ("selfcheck/", "runtime/", "buildtime/")  # run in the image or the build


def writes(path: Path) -> list[tuple[str, int]]:
    """(function, line) of every call in `path` that writes to a stream."""
    found = []
    tree = ast.parse(path.read_text(), str(path))
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(func):
            if isinstance(node, ast.Call) and _writes_a_stream(node):
                found.append((func.name, node.lineno))
    return found


def _writes_a_stream(call: ast.Call) -> bool:
    name = getattr(call.func, "attr", getattr(call.func, "id", ""))
    target = getattr(call.func, "value", None)
    receiver = ast.unparse(target) if target is not None else ""
    if name in {"write", "writelines"}:  # a file imagekit writes (a report) is not a stream
        return "stdout" in receiver or "stderr" in receiver
    return name in WRITERS and receiver != "terminal"


def test_only_the_one_writer_writes_for_people() -> None:
    leaks = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith(IN_IMAGE):
            continue
        for function, line in writes(path):
            if (rel, function) not in ALLOWED:
                leaks.append(f"{rel}:{line} in {function}")
    assert not leaks, f"write through imagekit/terminal.py instead: {leaks}"


def test_the_structural_test_finds_a_print() -> None:
    fixture = PACKAGE.parent / "tests" / "data" / "writes_fixture.py"
    fixture.write_text(
        "def f():\n    print('x')\n\ndef g(fh):\n    fh.write('y')\n"
        "    terminal.echo('z')\n\ndef h():\n    sys.stderr.write('w')\n"
    )
    try:
        assert writes(fixture) == [("f", 2), ("h", 9)]
    finally:
        fixture.unlink()


# --- every entry point, with generated values --------------------------------------------

Entry = Callable[[pytest.CaptureFixture[str], Path, str], Ran]


def lock_path(capsys: pytest.CaptureFixture[str], tmp: Path, value: str) -> Ran:
    # the issue's example: a lock path with a newline and a workflow command after it (its
    # package lock folder holds a damaged lock, which the error names)
    folder = tmp / value / "packages.lock"
    folder.mkdir(parents=True)
    (folder / f"{CELL}.txt").write_text("garbage\n")
    return run(capsys, "lock", "--check", "--envs", "envs", "--lock", str(tmp / value / "x.lock"))


def filter_value(capsys: pytest.CaptureFixture[str], tmp: Path, value: str) -> Ran:
    return run(capsys, "list", "--envs", "envs", "--cuda", value)


def matrix_value(capsys: pytest.CaptureFixture[str], tmp: Path, value: str) -> Ran:
    # JSON's string escapes are YAML's: the file holds the value's control characters
    (tmp / "m.yaml").write_text(
        f"matrix:\n  - cuda: {json.dumps(value)}\n    torch: '2.13.0'\n"
        "    python: '3.11'\n    os: debian12\n    flavor: slim\n"
    )
    return run(capsys, "list", "--envs", str(tmp / "m.yaml"))


def file_name(capsys: pytest.CaptureFixture[str], tmp: Path, value: str) -> Ran:
    path = tmp / f"{value}.yaml"
    path.write_text("matrix: 3\n")
    return run(capsys, "list", "--envs", str(path))


def image_reference(capsys: pytest.CaptureFixture[str], tmp: Path, value: str) -> Ran:
    return run(capsys, "test", value)


def environment(capsys: pytest.CaptureFixture[str], tmp: Path, value: str) -> Ran:
    os.environ["IMAGEKIT_INDEX_URL"] = f"https://host/{value}"
    try:
        return run(capsys, "build", "--envs", "envs", "--dry-run")
    finally:
        del os.environ["IMAGEKIT_INDEX_URL"]


def gpu_name(capsys: pytest.CaptureFixture[str], tmp: Path, value: str) -> Ran:
    return run(capsys, "compat", "show", "--gpu", value)


def launch_name(capsys: pytest.CaptureFixture[str], tmp: Path, value: str) -> Ran:
    return run(
        capsys,
        *(
            "launch",
            "--envs",
            "envs",
            "--scheduler",
            "slurm",
            "--nodes",
            "2",
            "--gpus-per-node",
            "8",
        ),
        *("--name", value, "--", "train.py"),
    )


def committed_dockerfile(capsys: pytest.CaptureFixture[str], tmp: Path, value: str) -> Ran:
    dockerfile = next(Path("dockerfiles").glob("*/Dockerfile"))
    original = dockerfile.read_bytes()
    dockerfile.write_bytes(original + f"# {value}\n".encode())
    try:
        return run(capsys, "render", "--envs", "envs", "--check")
    finally:
        dockerfile.write_bytes(original)


ENTRIES: dict[str, Entry] = {
    "lock path": lock_path,
    "filter value": filter_value,
    "matrix value": matrix_value,
    "matrix file name": file_name,
    "image reference": image_reference,
    "environment variable": environment,
    "gpu name": gpu_name,
    "launch name": launch_name,
    "committed Dockerfile": committed_dockerfile,
}


STALE = {"lock path", "committed Dockerfile"}  # exit 4; the others are refused, exit 2


@pytest.mark.parametrize("entry", list(ENTRIES))
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=values)
def test_no_value_starts_a_line_or_moves_the_cursor(
    entry: str,
    value: str,
    project: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    ran = ENTRIES[entry](capsys, tmp_path_factory.mktemp("v"), value)
    assert ran.code == (4 if entry in STALE else 2), ran
    assert_shown(ran, value)


def test_the_issues_lock_path_prints_its_error_on_two_lines(
    project: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    ran = lock_path(capsys, tmp_path, "a\n::notice title=INJECTED::y")
    head, problem = ran.err.rstrip("\n").split("\n")
    assert ran.code == 4 and head.endswith("package locks do not match the matrix:"), ran
    assert "a\\n::notice title=INJECTED::y/packages.lock/" in problem


# --- what containers and BuildKit print ----------------------------------------------


class HostileBuilds(FakeEngine):
    """Builds whose log lines carry the value; the failing one fails with them."""

    value: str = ""

    def build(self, request: BuildRequest, on_line: LineSink) -> BuildResult:
        on_line(f"#6 {self.value}")
        if request.context.name in self.fail_builds:
            raise BuildError("docker build failed; its last lines:", *terminal.foreign(self.value))
        return super().build(request, on_line)


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=values)
def test_build_log_lines_are_shown_not_obeyed(
    value: str,
    project: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    cells = [p.parent.name for p in Path("dockerfiles").glob("*/Dockerfile")]
    engine = HostileBuilds(fail_builds=set(cells))
    engine.value = value
    monkeypatch.setattr("imagekit.engine.docker.DockerEngine", lambda *_: engine)
    monkeypatch.setattr("imagekit.builder.git_labels.git_output", lambda *_: "")
    ran = run(capsys, "build", "--envs", "envs", "--progress", "plain", "--keep-going")
    assert ran.code == 6 and "failed" in ran.text, ran
    assert_shown(ran, value)


class HostileContainer(SelfcheckEngine):
    """An image whose labels, output and report carry the value."""

    value: str = ""

    def run(self, image: str, command: list[str], options: RunOptions) -> RunResult:
        self.options.append(options)
        report = {"checks": [{"name": self.value, "status": "failed", "reason": self.value}]}
        (Path(next(iter(options.volumes))) / "selfcheck.json").write_text(json.dumps(report))
        return RunResult(1, f"stack PASSED\n{self.value}\n")


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(value=values)
def test_a_containers_output_report_and_labels_are_shown_not_obeyed(
    value: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    engine = HostileContainer(1, {"io.imagekit.version": "0.1.0", "io.imagekit.torch": value})
    engine.value = value
    monkeypatch.setattr("imagekit.engine.docker.DockerEngine", lambda *_: engine)
    ran = run(capsys, "test", "reg/x:1")
    assert ran.code == 8, ran
    assert_shown(ran, value)


def test_a_crash_log_escapes_the_values_it_holds(
    project: Path,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    value = f"x\n{MARK}\x1b[2K"

    def crash(*args: object) -> None:
        raise RuntimeError(f"boom {value}")

    monkeypatch.setenv("IMAGEKIT_HOSTILE", value)
    monkeypatch.setattr("imagekit.render.dockerfile.render_all", crash)
    ran = run(capsys, "render", "--envs", "envs")
    assert ran.code == 70 and escape(MARK) in ran.err
    log = Path(re.findall(r"in (\S+imagekit-crash-\S+\.log)", ran.err)[0])
    try:
        text = log.read_text()
        assert_clean(text, "the crash log")
        assert f"IMAGEKIT_HOSTILE={escape(value)}" in text
        assert f"RuntimeError: boom {escape(value)}" in text
    finally:
        log.unlink()


@given(value=values)
def test_the_in_image_report_escapes_what_drivers_and_probes_said(value: str) -> None:
    from imagekit.contract.checks import CheckResult, Status
    from imagekit.selfcheck.run.report import checks_table

    results = {
        "gpus": CheckResult(Status.FAILED, value, {"name": value}, "gpus"),
        "stack": CheckResult(Status.PASSED, "", {"torch": value}, "stack"),
    }
    text = checks_table(results)
    assert_clean(text, "the self-check's table")
    assert escape(MARK) in text
