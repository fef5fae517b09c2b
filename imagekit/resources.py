"""Where the templates, the built-in catalog and the package data live.

In a wheel they sit inside the package (`imagekit/_templates`, `imagekit/_envs`,
`imagekit/_workflows`); in a checkout or an editable install they are the repository's
`templates/`, `envs/` and `.github/workflows/`.
"""

from __future__ import annotations

from pathlib import Path

from imagekit.errors import UsageError

PACKAGE_DIR = Path(__file__).resolve().parent
DATA_DIR = PACKAGE_DIR / "data"
INIT_DIR = DATA_DIR / "init"  # what `imagekit init` writes, less the workflow
BUILTIN = "builtin:"  # `--envs builtin:NAME`: a matrix file of the built-in catalog


def _first_existing(*candidates: Path) -> Path:
    for path in candidates:
        if path.exists():
            return path
    return candidates[-1]


def templates_dir() -> Path:
    return _first_existing(PACKAGE_DIR / "_templates", PACKAGE_DIR.parent / "templates")


def default_envs_dir() -> Path:
    """The built-in catalog's folder (used only where asked for: `--envs builtin:NAME`)."""
    return _first_existing(PACKAGE_DIR / "_envs", PACKAGE_DIR.parent / "envs")


def images_workflow() -> Path:
    """The repository's own .github/workflows/images.yml, which `imagekit init` adapts."""
    return _first_existing(
        PACKAGE_DIR / "_workflows" / "images.yml",
        PACKAGE_DIR.parent / ".github" / "workflows" / "images.yml",
    )


def builtin_catalogs() -> dict[str, Path]:
    """The built-in catalog's matrix files by name (`training` for training.yaml)."""
    folder = default_envs_dir()
    files = [*folder.glob("*.yaml"), *folder.glob("*.yml")]
    return {path.stem: path for path in sorted(files)}


def is_builtin(path: Path) -> bool:
    return str(path).startswith(BUILTIN)


def builtin(path: Path) -> Path:
    """`builtin:NAME` as the packaged file; any other path unchanged. UsageError (exit 2)
    for a name the catalog lacks, listing the names it has."""
    if not is_builtin(path):
        return path
    name = str(path).removeprefix(BUILTIN)
    found = builtin_catalogs()
    if name not in found:
        names = ", ".join(f"{BUILTIN}{n}" for n in found) or "none"
        raise UsageError(
            f"--envs {path}: the built-in catalog has no matrix {name!r}; its names: {names}"
        )
    return found[name]
