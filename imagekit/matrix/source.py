"""A cell's `source:` folder: where it may be, what of it is copied, and how.

The folder is copied into /workspace of a pushed image, so it must not become a way for
host files or credentials to leave the machine:
- it must be a directory inside the repository that holds the matrix file;
- symbolic links are copied as links, and a link that points outside the folder is refused
  (a link to ~/.ssh/id_rsa or ~/.docker/config.json would otherwise be followed);
- `.dockerignore` in the folder is honoured, and a default ignore list keeps environment
  files, git metadata and key files out unless the cell sets `source_default_ignore: false`.
Everything is checked when the matrix is validated, before anything is written or built.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

from imagekit.paths import UnsafeFile, read_checked

DEFAULT_IGNORE = (  # "**/" also matches at the top of the folder
    ".git",
    ".venv",
    ".imagekit",
    "**/.env",
    "**/.env.*",
    "**/*.pem",
    "**/*.key",
    "**/id_*",
    "**/.ssh",
    "**/.docker",
    "**/.netrc",
    "**/__pycache__",
)
MAX_FILES = 200_000


class SourceError(ValueError):
    pass


def repo_root(base_dir: Path) -> Path:
    """The repository around the matrix file: the nearest folder with .git; without git,
    the folder above envs/ (or the matrix file's own folder)."""
    for folder in (base_dir, *base_dir.parents):
        if (folder / ".git").exists():
            return folder
    return base_dir.parent if base_dir.name == "envs" else base_dir


def resolve_source(base_dir: Path, source: str) -> Path:
    """The checked source folder, or SourceError saying what is wrong and what is allowed."""
    root = repo_root(base_dir.resolve()).resolve()
    path = (base_dir / source).resolve()
    if path != root and root not in path.parents:
        raise SourceError(
            f"{source!r} is {path}, outside the repository {root}; source must be a folder "
            "inside the repository that holds the matrix file"
        )
    if not path.exists():
        raise SourceError(f"{source!r} does not exist (looked for {path})")
    if not path.is_dir():
        raise SourceError(f"{source!r} is not a directory; name the folder of your code")
    return path


def ignore_patterns(source: Path, default_ignore: bool) -> list[str]:
    patterns = list(DEFAULT_IGNORE) if default_ignore else []
    try:
        data = read_checked(source / ".dockerignore", ".dockerignore")
    except UnsafeFile as exc:
        raise SourceError(str(exc)) from None
    if data is not None:
        for line in data.decode("utf-8", errors="replace").splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                patterns.append(line)
    return patterns


def _regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go filepath.Match plus `**`) as a regex over a relative path;
    a match of a folder covers everything below it."""
    body = pattern.removeprefix("./").strip("/")
    out = []
    i = 0
    while i < len(body):
        if body.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif body.startswith("**", i):
            out.append(".*")
            i += 2
        elif body[i] == "*":
            out.append("[^/]*")
            i += 1
        elif body[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(body[i]))
            i += 1
    return re.compile("".join(out) + "(?:/.*)?")


class Matcher:
    """Docker's rule: the last pattern that matches decides; `!pattern` re-includes."""

    def __init__(self, patterns: list[str]) -> None:
        self.rules = [
            (p.startswith("!"), _regex(p[1:] if p.startswith("!") else p)) for p in patterns
        ]
        self.exceptions = [p[1:].removeprefix("./").strip("/") for p in patterns if p[:1] == "!"]

    def may_reinclude_below(self, folder: str) -> bool:
        """An ignored folder is still walked when an exception (`!data/keep.txt`) may match
        inside it, as Docker does."""
        return any(e.startswith(folder + "/") or "**" in e for e in self.exceptions)

    def ignored(self, relative: str) -> bool:
        result = False
        for negate, regex in self.rules:
            if regex.fullmatch(relative):
                result = not negate
        return result


def check_links(source: Path, matcher: Matcher) -> None:
    """Every symbolic link that would be copied must point inside the folder."""
    count = 0
    for folder, dirs, files in os.walk(source):
        for name in [*dirs, *files]:
            count += 1
            if count > MAX_FILES:
                raise SourceError(f"more than {MAX_FILES} files: is {source} the right folder?")
            path = Path(folder) / name
            relative = path.relative_to(source).as_posix()
            if not path.is_symlink() or matcher.ignored(relative):
                continue
            target = Path(os.path.realpath(path))
            if target != source and source not in target.parents:
                raise SourceError(
                    f"{relative} is a symbolic link to {os.readlink(path)}, outside the "
                    "source folder; copy the file in or drop the link (links are never "
                    "followed, so the image would hold a dangling link at best)"
                )
        dirs[:] = [d for d in dirs if not matcher.ignored(f"{Path(folder, d).relative_to(source)}")]


def checked(base_dir: Path, source: str, default_ignore: bool) -> Path:
    path = resolve_source(base_dir, source)
    check_links(path, Matcher(ignore_patterns(path, default_ignore)))
    return path


def copy_source(source: Path, dest: Path, default_ignore: bool) -> None:
    """Copy the folder as the image will hold it: links as links, ignored paths left out."""
    matcher = Matcher(ignore_patterns(source, default_ignore))
    shutil.copytree(source, dest, symlinks=True, ignore=_ignore_for(source, matcher))


def _ignore_for(source: Path, matcher: Matcher) -> Callable[[str, list[str]], set[str]]:
    def ignore(folder: str, names: list[str]) -> set[str]:
        base = Path(folder).relative_to(source)
        skipped = set()
        for name in names:
            relative = (base / name).as_posix()
            walk_on = Path(folder, name).is_dir() and not Path(folder, name).is_symlink()
            if matcher.ignored(relative) and not (
                walk_on and matcher.may_reinclude_below(relative)
            ):
                skipped.add(name)
        return skipped

    return ignore
