"""Where the templates, the default catalog and the package data live.

In a wheel they sit inside the package (`imagekit/_templates`, `imagekit/_envs`); in a
checkout or an editable install they are the repository's `templates/` and `envs/`.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
DATA_DIR = PACKAGE_DIR / "data"


def _first_existing(*candidates: Path) -> Path:
    for path in candidates:
        if path.is_dir():
            return path
    return candidates[-1]


def templates_dir() -> Path:
    return _first_existing(PACKAGE_DIR / "_templates", PACKAGE_DIR.parent / "templates")


def default_envs_dir() -> Path:
    return _first_existing(PACKAGE_DIR / "_envs", PACKAGE_DIR.parent / "envs")
