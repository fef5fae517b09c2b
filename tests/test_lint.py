"""Real checkers over what imagekit writes: hadolint and BuildKit's own parser."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import dockerfile
import pytest

from .conftest import ROOT

COMMITTED = sorted((ROOT / "dockerfiles").glob("*/Dockerfile"))
ALLOWED = {"FROM", "ENV", "RUN", "ARG", "COPY", "LABEL", "USER", "WORKDIR", "ENTRYPOINT", "CMD"}


@pytest.mark.subprocess
def test_hadolint_passes_on_every_committed_dockerfile() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    config = ROOT / ".hadolint.yaml"
    result = subprocess.run(
        [hadolint, "--config", str(config), "--no-color", *map(str, COMMITTED)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-1000:]
    assert len(COMMITTED) >= 40


def test_every_cell_folder_has_its_committed_dockerfile() -> None:
    # The parser test below runs once per file in COMMITTED: an empty or partial glob
    # would pass it silently.
    folders = sorted(p for p in (ROOT / "dockerfiles").iterdir() if p.is_dir())
    assert [p.parent for p in COMMITTED] == folders and len(COMMITTED) >= 40


@pytest.mark.parametrize("path", COMMITTED, ids=lambda p: p.parent.name)
def test_buildkit_parses_the_committed_dockerfiles(path: Path) -> None:
    commands = dockerfile.parse_file(str(path))
    assert {c.cmd for c in commands} <= ALLOWED
    stages = [c.value[-1] for c in commands if c.cmd == "FROM"]
    assert stages[0] == "os-base" and stages[-1] == "runtime"
