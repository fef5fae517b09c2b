"""Files read from the checkout stay in the checkout: a link that leaves the repository, a
FIFO, a device or an oversized file in place of a matrix file, images.lock, a package lock, a
committed Dockerfile or a .dockerignore is refused (exit 2), nothing of the target printed,
and nothing hangs (the FIFO has no writer)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from imagekit.paths import LIMITS, UnsafeFile, read_checked

from .hostile import CELL, lock_text, project, run, user_error

__all__ = ["project"]

CANARY = "CANARY_5ecret_of_the_runner"


@pytest.fixture(autouse=True)
def _no_hang() -> Iterator[None]:
    """A read that blocks (a FIFO without a writer) fails the test instead of hanging it."""

    def hung(*args: object) -> None:
        raise AssertionError("a read blocked")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def outside_secret(project: Path) -> Path:
    secret = project.parent / "outside" / "secret.txt"
    secret.parent.mkdir(exist_ok=True)
    secret.write_text(f"images: {CANARY}\n{CANARY}\n")
    return secret


def link_out(path: Path, project: Path) -> None:
    path.unlink(missing_ok=True)
    path.symlink_to(outside_secret(project))


def fifo(path: Path, project: Path) -> None:
    path.unlink(missing_ok=True)
    os.mkfifo(path)


def device(path: Path, project: Path) -> None:
    path.unlink(missing_ok=True)
    path.symlink_to("/dev/zero")


def oversized(path: Path, project: Path) -> None:
    path.write_bytes(b"#" * (5 << 20) + CANARY.encode())


def proc_environ(path: Path, project: Path) -> None:
    path.unlink(missing_ok=True)
    path.symlink_to("/proc/self/environ")


HOSTILE: list[Callable[[Path, Path], None]] = [link_out, fifo, device, oversized, proc_environ]
DF = f"dockerfiles/{CELL}/Dockerfile"
# (the file, the commands that read it)
FILES = [
    ("envs/cpu.yaml", [("list",), ("render", "--check"), ("lock", "--check")]),
    ("envs/images.lock", [("list",), ("render", "--check")]),
    (f"envs/packages.lock/{CELL}.txt", [("lock", "--check"), ("render", "--check"), ("stage",)]),
    (DF, [("render", "--check"), ("render",)]),
    ("app/.dockerignore", [("list",), ("stage",)]),
]


@pytest.mark.parametrize("hostile", HOSTILE, ids=[h.__name__ for h in HOSTILE])
@pytest.mark.parametrize(("name", "commands"), FILES, ids=[f for f, _ in FILES])
def test_a_hostile_file_in_the_checkout_is_refused_unread(
    project: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    hostile: Callable[[Path, Path], None],
    name: str,
    commands: list[tuple[str, ...]],
) -> None:
    monkeypatch.setenv("IMAGEKIT_TEST_CANARY", CANARY)  # what /proc/self/environ would show
    lock_text(project, capsys)
    path = project / name
    hostile(path, project)
    for command in commands:
        ran = run(capsys, command[0], "--envs", "envs", *command[1:])
        user_error(ran, Path(name).name)
        assert CANARY not in ran.text


def test_a_link_inside_the_repository_is_followed(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shared = project / "shared"
    shared.mkdir()
    matrix = project / "envs" / "cpu.yaml"
    matrix.rename(shared / "cpu.yaml")
    matrix.symlink_to(Path("..") / "shared" / "cpu.yaml")
    assert run(capsys, "list", "--envs", "envs").code == 0


def test_the_reader_says_why_and_returns_none_for_nothing(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    assert read_checked(tmp_path / "absent", "images.lock") is None
    ok = tmp_path / "ok"
    ok.write_bytes(b"x" * LIMITS["images.lock"])
    assert read_checked(ok, "images.lock") == ok.read_bytes()
    ok.write_bytes(b"x" * (LIMITS["images.lock"] + 1))
    with pytest.raises(UnsafeFile, match="may be at most"):
        read_checked(ok, "images.lock")
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(UnsafeFile, match="not a regular file"):
        read_checked(tmp_path / "fifo", "images.lock")
    (tmp_path / "dir").mkdir()
    with pytest.raises(UnsafeFile, match="not a regular file"):
        read_checked(tmp_path / "dir", "images.lock")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(UnsafeFile, match="cannot read"):
        read_checked(tmp_path / "dangling", "images.lock")
    (tmp_path / "out").symlink_to("/etc/hostname")
    with pytest.raises(UnsafeFile, match="outside the repository") as caught:
        read_checked(tmp_path / "out", "images.lock")
    assert "/etc/hostname" not in str(caught.value)
