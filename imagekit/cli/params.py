"""Typed click parameters: each option's value is checked at the edge against the grammar of
the place it lands (a folder imagekit writes into, a tag, a URL, an image reference ...).

A value that does not fit is click's BadParameter: exit 2, naming the option and the value,
with what would be valid. Nothing is written or contacted before every option is checked.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click


def _nearest_existing(path: Path) -> Path:
    for candidate in (path, *path.parents):
        if candidate.exists() or candidate.is_symlink():
            return candidate
    return Path(".")


class OutDir(click.ParamType):
    """A folder imagekit writes into: it, or the nearest folder above it that exists, must be
    a folder (a file where a folder is expected is refused before anything is written)."""

    name = "folder"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        path = Path(value)
        found = _nearest_existing(path)
        if not found.is_dir():
            what = "is" if found == path else f"is below {found}, which is"
            self.fail(
                f"{str(path)!r} {what} not a folder; name a folder (it is made if missing)",
                param,
                ctx,
            )
        return path


class OutFile(click.ParamType):
    """A file imagekit writes: not a folder, and in a folder (made if missing)."""

    name = "file"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        path = Path(value)
        if path.is_dir():
            self.fail(f"{str(path)!r} is a folder; name a file to write", param, ctx)
        found = _nearest_existing(path.parent)
        if not found.is_dir():
            self.fail(
                f"{str(path)!r} is below {found}, which is not a folder; name a file in a folder",
                param,
                ctx,
            )
        return path


OUT_DIR = OutDir()
OUT_FILE = OutFile()
