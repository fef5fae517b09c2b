"""docs/labels.md documents every label imagekit writes (imagekit/contract/labels.py, the
OCI labels of a cell and of a build)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from imagekit.builder import git_labels
from imagekit.contract import labels
from imagekit.locks.pinned import load_cells

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "labels.md").read_text()


def test_every_label_constant_is_documented() -> None:
    names = [v for k, v in vars(labels).items() if k.isupper() and k != "PREFIX"]
    assert names and all(isinstance(n, str) for n in names)
    missing = [n for n in names if f"`{n}`" not in DOC]
    assert missing == []


def test_every_label_a_cell_or_a_build_writes_is_documented() -> None:
    cells = load_cells(sorted((ROOT / "envs").glob("*.yaml")))
    written = {name for cell in cells for name, _ in cell.labels}
    # build_labels asks git; the names it can set are in its source
    written |= set(
        re.findall(r'"(org\.opencontainers\.image\.\w+)"', inspect.getsource(git_labels))
    )
    assert "org.opencontainers.image.source" in written
    assert [n for n in sorted(written) if f"`{n}`" not in DOC] == []
