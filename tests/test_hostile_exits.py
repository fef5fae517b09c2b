"""A user's mistake is exit 2 naming what is wrong, never exit 70 (an internal error): every
path option given a file where a folder is expected (or the reverse), images.lock and package
locks in their malformed forms, and tag templates that ask for a format spec."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from .hostile import CELL, lock_text, project, run, user_error

__all__ = ["project"]  # the fixture, imported for pytest

LAUNCH = [
    "launch",
    "--envs",
    "envs",
    "--scheduler",
    "slurm",
    "--nodes",
    "1",
    "--gpus-per-node",
    "1",
]


@pytest.mark.parametrize(
    ("args", "option"),
    [
        ([*LAUNCH, "--out", "afile/sub", "--", "t.py"], "--out"),
        ([*LAUNCH, "--out", "afile", "--", "t.py"], "--out"),
        (["render", "--envs", "envs", "--out", "afile"], "--out"),
        (["render", "--envs", "envs", "--out", "afile/sub/deeper"], "--out"),
        (["build", "--envs", "envs", "--dry-run", "--report-dir", "afile/r"], "--report-dir"),
        (["test", "img", "--json", "adir"], "--json"),
        (["test", "img", "--junit", "afile/x.xml"], "--junit"),
    ],
)
def test_a_path_of_the_wrong_kind_is_exit_2_naming_the_option(
    project: Path, capsys: pytest.CaptureFixture[str], args: list[str], option: str
) -> None:
    (project / "afile").write_text("a file, not a folder\n")
    (project / "adir").mkdir()
    user_error(run(capsys, *args), option, "folder")


def test_launch_out_that_cannot_be_written_is_exit_2(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = project / "jobs"
    out.mkdir()
    out.chmod(0o500)
    try:
        ran = run(capsys, *LAUNCH, "--out", "jobs", "--", "t.py")
    finally:
        out.chmod(0o700)
    if ran.code != 0:  # root writes anyway
        user_error(ran, "--out", "jobs")


IMAGES_LOCKS: list[tuple[str, bytes]] = [
    ("deeply nested", b'{"images": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    ("not UTF-8", b'\xff\xfe{"images": {}}'),
    ("a list", b"[]"),
    ("a string", b'"images"'),
    ("a number", b"1e999"),
    ("images a list", b'{"images": ["debian:12"]}'),
    ("a pin a number", b'{"images": {"debian:12": 1}}'),
    ("a pin an object", b'{"images": {"debian:12": {"a": 1}}}'),
    ("a bad reference", b'{"images": {"FROM evil": "sha256:' + b"a" * 64 + b'"}}'),
    ("empty", b""),
    ("truncated", b'{"images": {"debian:12": "sha'),
]


@pytest.mark.parametrize(("what", "data"), IMAGES_LOCKS, ids=[w for w, _ in IMAGES_LOCKS])
@pytest.mark.parametrize("command", ["list", "render", "launch"])
def test_a_malformed_images_lock_is_exit_2(
    project: Path, capsys: pytest.CaptureFixture[str], what: str, data: bytes, command: str
) -> None:
    (project / "envs" / "images.lock").write_bytes(data)
    args = [*LAUNCH, "--", "t.py"] if command == "launch" else [command, "--envs", "envs"]
    user_error(run(capsys, *args), "images.lock", "imagekit lock")


def _deep_inputs(text: str) -> str:
    head, _, rest = text.partition("# inputs: ")
    _line, _, tail = rest.partition("\n")
    return f"{head}# inputs: {'[' * 100_000}{']' * 100_000}\n{tail}"


PACKAGE_LOCKS: list[tuple[str, Callable[[str], bytes]]] = [
    ("not UTF-8", lambda t: b"\xff" + t.encode()),
    ("deeply nested inputs", lambda t: _deep_inputs(t).encode()),
    ("inputs a list", lambda t: t.replace("# inputs: {", "# inputs: [{", 1).encode()),
    ("no fingerprint", lambda t: t.replace("# fingerprint:", "# print:").encode()),
    ("no inputs", lambda t: t.replace("# inputs:", "# input:").encode()),
    ("empty", lambda t: b""),
    ("a pin without hashes", lambda t: t + "evil==1.0\n"),  # type: ignore[operator]
    ("binary", lambda t: bytes(range(256))),
]


@pytest.mark.parametrize(("what", "edit"), PACKAGE_LOCKS, ids=[w for w, _ in PACKAGE_LOCKS])
@pytest.mark.parametrize("command", [("lock", "--check"), ("render", "--check"), ("stage",)])
def test_a_malformed_package_lock_is_refused_never_a_crash(
    project: Path,
    capsys: pytest.CaptureFixture[str],
    what: str,
    edit: Callable[[str], bytes | str],
    command: tuple[str, ...],
) -> None:
    path = lock_text(project, capsys)
    damaged = edit(path.read_text())
    path.write_bytes(damaged if isinstance(damaged, bytes) else damaged.encode())
    ran = run(capsys, command[0], "--envs", "envs", *command[1:])
    assert ran.code in (2, 4), ran  # unreadable (2) or not matching its cell (4)
    assert "internal error" not in ran.text and f"{CELL}.txt" in ran.text
    assert "imagekit lock --packages" in ran.text


@pytest.mark.parametrize(
    "template",
    [
        "{torch:>99999999999}",
        "{torch:>999999}",
        "{torch!r}",
        "{torch:{python}}",
        "{torch.__class__}",
        "{0}",
        "{}",
        "{torch[0]}",
    ],
)
def test_a_tag_template_with_a_format_spec_is_a_located_problem(
    project: Path, capsys: pytest.CaptureFixture[str], template: str
) -> None:
    matrix = project / "envs" / "cpu.yaml"
    text = matrix.read_text().replace(
        '"{torch}-{variant}', json.dumps(template)[:-1] + "-{variant}"
    )
    matrix.write_text(text)
    ran = run(capsys, "list", "--envs", "envs")
    user_error(ran, "cpu.yaml", "tag")
    assert len(ran.text) < 2_000  # the rendered value is not echoed in full
