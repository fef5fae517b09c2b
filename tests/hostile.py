"""Helpers of the hostile-input tests: a copy of the test project, the CLI run in-process with
its exit code and output, and a valid package lock to damage."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from imagekit.cli import main
from imagekit.locks import resolving

from .conftest import ROOT
from .test_packagelock import CELL, fake_resolver


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str

    @property
    def text(self) -> str:
        return self.out + self.err


def run(capsys: pytest.CaptureFixture[str], *args: str) -> Ran:
    """The CLI in this process: exit code, stdout, stderr. A crash (exit 70) is never a pass."""
    capsys.readouterr()
    try:
        main(list(args))
    except SystemExit as exc:
        code = int(exc.code or 0)
    else:
        raise AssertionError("main() must always exit")
    out, err = capsys.readouterr()
    return Ran(code, out, err)


def user_error(ran: Ran, *words: str) -> None:
    """A user's mistake: exit 2, no internal error, and the message names `words`."""
    assert ran.code == 2, ran
    assert "internal error" not in ran.text and "Traceback" not in ran.text
    for word in words:
        assert word in ran.text, (word, ran.text)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """tests/data copied into tmp_path/p (the working directory), rendered, with a git folder
    so that it is a repository of its own."""
    shutil.copytree(ROOT / "tests" / "data", tmp_path / "p")
    (tmp_path / "p" / ".git").mkdir()
    monkeypatch.chdir(tmp_path / "p")
    monkeypatch.setattr(resolving, "RESOLVER", fake_resolver)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    try:
        main(["render", "--envs", "envs"])
    except SystemExit as exc:
        assert exc.code == 0
    return tmp_path / "p"


def lock_text(project: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """Write the cell's package lock with the fake resolver; its path."""
    assert run(capsys, "lock", "--envs", "envs", "--packages", "--no-bases").code == 0
    return project / "envs" / "packages.lock" / f"{CELL}.txt"
