"""The team's `requirements:` files and `source_package:` folder, read when the matrix is.

A `requirements:` entry is a path relative to the matrix file, inside the repository (as
`source:` is): a requirements file (one PEP 508 requirement a line, `#` comments, `\\`
continuations, `-r other.txt` followed), or a pyproject.toml whose [project].dependencies are
used. Options that change where packages come from or how they are checked are refused with
the fix (an index is `imagekit build --index-url`, a local package `source_package`, hashes
`imagekit lock --packages`). The requirements themselves go into the Dockerfile, so a changed
file is a stale Dockerfile (`imagekit render --check`) and a stale lock.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from imagekit.matrix.envfile import check_pip
from imagekit.matrix.source import SourceError, repo_root
from imagekit.paths import UnsafeFile, read_checked
from imagekit.urls import mask

try:  # Python 3.11 on; tomli is the same module for 3.10
    import tomllib
except ImportError:  # pragma: no cover - Python 3.10
    try:
        import tomli as tomllib  # type: ignore[no-redef,import-not-found,unused-ignore]
    except ImportError:
        tomllib = None  # type: ignore[assignment]

WHAT = "requirements file"  # its weight limit is in paths.LIMITS
MAX_DEPTH = 8  # -r inside -r inside ...: a real project nests one or two
MAX_REQUIREMENTS = 2_000

# Each refused option, and what to do instead.
_REFUSED = {
    ("-c", "--constraint"): "imagekit constrains the team's packages to the cell's stack "
    "itself; put the pins you need in the requirements",
    ("-e", "--editable"): "install the repository's own package with `source_package: true` "
    "(and `source:` naming its folder)",
    ("-i", "--index-url", "--extra-index-url", "--no-index"): "pass an index with `imagekit "
    "build --index-url` (a BuildKit secret: it never reaches the Dockerfile or the image)",
    ("-f", "--find-links"): "pass local wheels with `imagekit build --wheelhouse DIR`",
    ("--hash",): "hashes come from `imagekit lock --packages`, which locks the team's "
    "packages with them",
}


class RequirementsError(SourceError):
    """A `requirements:` entry or `source_package` that cannot be used; names the fix and
    the field (`requirements` or `source_package`)."""

    def __init__(self, message: str, field: str = "requirements") -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Requirements:
    """What one `requirements:` entry holds: the file as shown, and its requirements."""

    shown: str  # relative to the repository
    lines: tuple[str, ...]


def read(base_dir: Path, entry: str) -> Requirements:
    """The requirements of one entry, checked; RequirementsError says what is wrong."""
    root = repo_root(base_dir.resolve()).resolve()
    path = _inside(root, base_dir, entry)
    if path.name == "pyproject.toml":
        lines = tuple(_pyproject(path, root, entry))
    else:
        lines = tuple(dict.fromkeys(_requirements_file(path, root, entry, set(), 0)))
    if len(lines) > MAX_REQUIREMENTS:
        raise RequirementsError(
            f"{entry!r} holds {len(lines)} requirements; at most {MAX_REQUIREMENTS} (is it "
            "the right file?)"
        )
    return Requirements(path.relative_to(root).as_posix(), lines)


def _inside(root: Path, base_dir: Path, entry: str) -> Path:
    path = (base_dir / entry).resolve()
    if root not in path.parents:
        raise RequirementsError(
            f"{entry!r} is {path}, outside the repository {root}; a requirements file must be "
            "inside the repository that holds the matrix file"
        )
    if not path.exists():
        raise RequirementsError(f"{entry!r} does not exist (looked for {path})")
    if not path.is_file():
        raise RequirementsError(
            f"{entry!r} is not a file; name a requirements file or a pyproject.toml"
        )
    return path


def _text(path: Path, root: Path, entry: str) -> str:
    try:
        data = read_checked(path, WHAT, root)
    except UnsafeFile as exc:
        raise RequirementsError(str(exc)) from None
    try:
        return (data or b"").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RequirementsError(f"{entry!r}: not UTF-8 text at byte {exc.start}") from None


def _requirements_file(
    path: Path, root: Path, entry: str, seen: set[Path], depth: int
) -> list[str]:
    if path in seen or depth > MAX_DEPTH:
        why = "includes itself" if path in seen else f"nests -r deeper than {MAX_DEPTH}"
        raise RequirementsError(f"{entry!r}: {path.relative_to(root)} {why}")
    seen = seen | {path}
    found: list[str] = []
    for number, line in _logical_lines(_text(path, root, entry)):
        where = f"{path.relative_to(root).as_posix()}:{number}"
        if line.startswith("-"):
            found += _option(line, path, root, where, seen, depth)
        else:
            found.append(check_requirement(line, where))
    return found


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line's number, the line joined and without its comment), blank ones left out."""
    lines: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        if not pending:
            start = number
        stripped = raw.rstrip()
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        line = _uncomment(pending + raw).strip()
        pending = ""
        if line:
            lines.append((start, line))
    if pending.strip():
        lines.append((start, _uncomment(pending).strip()))
    return lines


def _uncomment(line: str) -> str:
    """pip's rule: `#` starts a comment at the line's start or after whitespace."""
    if line.lstrip().startswith("#"):
        return ""
    for i, char in enumerate(line):
        if char == "#" and i and line[i - 1] in " \t":
            return line[:i]
    return line


def _option(
    line: str, path: Path, root: Path, where: str, seen: set[Path], depth: int
) -> list[str]:
    word, _, rest = line.replace("=", " ", 1).partition(" ")
    if word in ("-r", "--requirement"):
        target = rest.strip()
        if not target:
            raise RequirementsError(f"{where}: {word} names no file")
        included = _inside(root, path.parent, target)
        return _requirements_file(included, root, where, seen, depth + 1)
    for words, fix in _REFUSED.items():
        if word in words:
            raise RequirementsError(f"{where}: {_shown(line)}: not taken here; {fix}")
    if "--hash" in line:
        raise RequirementsError(f"{where}: {_shown(line)}: not taken here; {_REFUSED[('--hash',)]}")
    raise RequirementsError(
        f"{where}: {_shown(line)}: an installer option, which imagekit does not pass on; a "
        "requirements file for imagekit holds requirements and -r lines only"
    )


def _shown(line: str) -> str:
    """A line in a message: credentials masked, cut at 120 characters."""
    return repr(mask(line)[:120])


def check_requirement(line: str, where: str) -> str:
    """One requirement, as `pip:` checks its entries (PEP 508, no credentials in a URL), and
    no file: URL (a path on this machine, which the build cannot see)."""
    if " --hash" in line:
        raise RequirementsError(f"{where}: {_shown(line)}: {_REFUSED[('--hash',)]}")
    try:
        check_pip(line)
    except ValueError as exc:
        raise RequirementsError(f"{where}: {_shown(line)}: {exc}") from None
    if "file:" in line.split("@", 1)[-1] and "@" in line:
        raise RequirementsError(
            f"{where}: {_shown(line)}: a file: URL is a path on this machine, which the build "
            "cannot see; use `source_package: true`, or `imagekit build --wheelhouse DIR`"
        )
    return line


def _pyproject(path: Path, root: Path, entry: str) -> list[str]:
    shown = path.relative_to(root).as_posix()
    project = _project_table(path, root, entry)
    if project is None:
        raise RequirementsError(
            f"{shown}: no [project] table; requirements from a pyproject.toml are its "
            "[project].dependencies"
        )
    if "dependencies" in project.get("dynamic", ()):
        raise RequirementsError(
            f"{shown}: [project].dependencies is dynamic (computed by the build backend); list "
            "them in [project].dependencies, or name a requirements file instead"
        )
    dependencies = project.get("dependencies", [])
    if not isinstance(dependencies, list) or not all(isinstance(d, str) for d in dependencies):
        raise RequirementsError(f"{shown}: [project].dependencies must be a list of strings")
    return [check_requirement(d.strip(), f"{shown}: [project].dependencies") for d in dependencies]


def _project_table(path: Path, root: Path, entry: str) -> dict[str, object] | None:
    if tomllib is None:  # pragma: no cover - Python 3.10 without tomli
        raise RequirementsError(
            f"{entry!r}: reading a pyproject.toml needs Python 3.11 or `pip install tomli`"
        )
    try:
        document = tomllib.loads(_text(path, root, entry))
    except tomllib.TOMLDecodeError as exc:
        raise RequirementsError(f"{entry!r}: not valid TOML ({exc})") from None
    project = document.get("project")
    return project if isinstance(project, dict) else None


def source_package(source: Path) -> tuple[str, ...] | None:
    """The dependencies of the source folder's package as its pyproject.toml declares them;
    None where they are not static (setup.py, dynamic): then the build resolves them, and
    `imagekit lock --packages` locks the cell's stack groups but not the team's packages.
    RequirementsError when the folder is not a package."""
    root = repo_root(source).resolve()
    pyproject = source / "pyproject.toml"
    if not pyproject.is_file() and not (source / "setup.py").is_file():
        raise RequirementsError(
            f"{source} has no pyproject.toml or setup.py, so it is no Python package; add "
            "one, or drop `source_package`",
            "source_package",
        )
    if not pyproject.is_file():
        return None
    try:
        return _static_dependencies(pyproject, root)
    except RequirementsError as exc:
        raise RequirementsError(str(exc), "source_package") from None


def _static_dependencies(pyproject: Path, root: Path) -> tuple[str, ...] | None:
    shown = os.path.relpath(pyproject, root)
    project = _project_table(pyproject, root, shown)
    if project is None or "dependencies" in project.get("dynamic", ()):
        return None
    dependencies = project.get("dependencies", [])
    if not isinstance(dependencies, list):
        raise RequirementsError(f"{shown}: [project].dependencies must be a list of strings")
    where = f"{shown}: [project].dependencies"
    return tuple(check_requirement(str(d).strip(), where) for d in dependencies)
