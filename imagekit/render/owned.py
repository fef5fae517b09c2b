"""Committed Dockerfiles and who owns them (docs/rendering.md).

Each file `imagekit render` writes carries one ownership line near its top:

    # imagekit: matrix=envs/training.yaml cell=pytorch-train-cu126-... sha256=<64 hex>

`matrix` is the matrix file that defines the cell (relative to the repository root, or
`builtin:NAME`), `cell`
the cell's id, `sha256` the digest of the whole file as it would read with that value
written as 64 zeros, so any edit, to the body or to the line itself, shows. From these,
render writes only what its own matrix files own, and never deletes or overwrites another
matrix's file or a person's edit.
"""

from __future__ import annotations

import codecs
import contextlib
import difflib
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from imagekit import paths, resources
from imagekit.errors import StaleError, UsageError

PREFIX = "# imagekit: "
LEGACY = "# Rendered by imagekit for cell "  # an older imagekit's first line
ZERO = "0" * 64
SYNTAX = "# syntax="  # a parser directive: BuildKit reads it on the first line only


@dataclass(frozen=True)
class Owner:
    """A file's ownership line, as read."""

    matrix: str
    cell: str
    sha256: str


@dataclass(frozen=True)
class Found:
    """What a committed file says of itself. `owner`: its ownership line (None without one);
    `intact`: its bytes are still those imagekit wrote; `legacy`: (cell, matrix file) from an
    older imagekit's first line, for a file without an ownership line."""

    owner: Owner | None = None
    intact: bool = False
    legacy: tuple[str, str] | None = None


def line(matrix: str, cell: str, digest: str) -> str:
    return f"{PREFIX}matrix={_escape(matrix)} cell={cell} sha256={digest}"


def stamp(body: str, matrix: str, cell: str) -> str:
    """The file to commit: `body` with its ownership line, first, or second after a
    `# syntax=` directive (which must stay the first line)."""
    head, rest = _split_directive(body)
    unsigned = f"{head}{line(matrix, cell, ZERO)}\n{rest}"
    digest = hashlib.sha256(unsigned.encode("utf-8")).hexdigest()
    return f"{head}{line(matrix, cell, digest)}\n{rest}"


def unstamped(text: str) -> str:
    """`text` without its ownership line: the body as `dockerfile.render` gives it."""
    head, rest = _split_directive(text)
    if rest.startswith(PREFIX):
        rest = rest.split("\n", 1)[1] if "\n" in rest else ""
    return head + rest


def read(data: bytes) -> Found:
    """What `data`, a committed file, says about who wrote it."""
    first = data.split(b"\n", 2)
    for index, raw in enumerate(first[:2]):
        if raw.startswith(PREFIX.encode()):
            return _owned(data, first, index)
    # an older imagekit's line: first, or second after a `# syntax=` directive
    legacy = _legacy(
        first[1] if first[0].startswith(SYNTAX.encode()) and len(first) > 1 else first[0]
    )
    return Found(legacy=legacy)


def _owned(data: bytes, first: list[bytes], index: int) -> Found:
    text = first[index].decode("utf-8", "replace")
    values = dict(
        token.partition("=")[::2] for token in text[len(PREFIX) :].split(" ") if "=" in token
    )
    try:
        owner = Owner(_unescape(values["matrix"]), values["cell"], values["sha256"])
    except (KeyError, UnicodeDecodeError):
        return Found(owner=Owner("?", "?", ""), intact=False)  # a claim that does not parse
    zeroed = text.replace(f"sha256={owner.sha256}", f"sha256={ZERO}", 1).encode("utf-8")
    whole = data.split(b"\n")
    whole[index] = zeroed
    intact = hashlib.sha256(b"\n".join(whole)).hexdigest() == owner.sha256
    return Found(owner=owner, intact=intact)


def _legacy(first: bytes) -> tuple[str, str] | None:
    """`# Rendered by imagekit for cell ID (FILE:LINE).` -> (ID, FILE)."""
    text = first.decode("utf-8", "replace")
    if not text.startswith(LEGACY) or " (" not in text:
        return None
    cell, _, origin = text[len(LEGACY) :].partition(" (")
    return cell, origin.removesuffix(").").rsplit(":", 1)[0]


def _split_directive(text: str) -> tuple[str, str]:
    if text.startswith(SYNTAX) and "\n" in text:
        head, rest = text.split("\n", 1)
        return head + "\n", rest
    return "", text


def _escape(matrix: str) -> str:
    """One token: control and non-ASCII characters escaped, a space as \\x20."""
    return matrix.encode("unicode_escape").decode("ascii").replace(" ", "\\x20")


def _unescape(value: str) -> str:
    return codecs.decode(value, "unicode_escape")


# -- what render does -------------------------------------------------------------------------


@dataclass
class Plan:
    """What a render would do, decided before anything is written. `matrices`: each matrix
    file rendered (as ownership lines name it) -> every cell id it defines, filtered or not."""

    writes: list[tuple[Path, str]] = field(default_factory=list)
    removals: list[tuple[Path, str]] = field(default_factory=list)  # (folder, why)
    refused: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # an older imagekit's files left in place


@dataclass(frozen=True)
class Names:
    """The matrix files an ownership line may name, seen from this render. `root`: the
    repository the names are relative to; `rendered`: each matrix file read (as the file
    it names) -> its name; `folders`: the folders those files are in."""

    root: Path
    rendered: Mapping[Path, str]
    folders: frozenset[Path]

    @classmethod
    def of(cls, matrices: Mapping[str, frozenset[str]], root: Path) -> Names:
        rendered = {where(name, root): name for name in matrices}
        return cls(root, rendered, frozenset(path.parent for path in rendered))

    def rendered_as(self, name: str) -> str | None:
        """The name render gives the matrix file `name` names, when render read that file
        (compared as files, not as strings: `envs/x.yaml` and `/repo/envs/x.yaml` are one)."""
        return self.rendered.get(where(name, self.root))

    def gone(self, name: str) -> bool:
        """The matrix file `name` names no longer exists, and was in a folder this render
        reads: nobody owns its files any more. One gone from elsewhere (another folder,
        another repository, a name resolved against another root) is not this render's to
        judge."""
        path = where(name, self.root)
        return not os.path.lexists(path) and path.parent in self.folders


def where(name: str, root: Path) -> Path:
    """The file an ownership line's `matrix` names: `builtin:NAME` the packaged file (where
    it would be when the catalog no longer has it), an absolute name itself, any other
    relative to `root`; resolved."""
    if name.startswith(resources.BUILTIN):
        stem = name.removeprefix(resources.BUILTIN)
        found = resources.builtin_catalogs().get(stem)
        return (found or resources.default_envs_dir() / f"{stem}.yaml").resolve()
    return (root / name).resolve()


def plan(
    rendered: Mapping[str, str],
    out_dir: Path,
    matrices: Mapping[str, frozenset[str]],
    root: Path | None = None,
) -> Plan:
    """Decide every write, refusal and removal; nothing is touched here. `root`: the
    repository the ownership lines' names are relative to (dockerfile.root_of; default the
    repository of `out_dir`)."""
    result = Plan()
    names = Names.of(matrices, root or paths.repository_of(out_dir))
    for cell_id, text in sorted(rendered.items()):
        path = paths.committed_dockerfile(out_dir, cell_id)
        data = paths.read_checked(path, "Dockerfile")
        if data == text.encode("utf-8"):
            continue
        problem = None if data is None else _refusal(path, data, text, names)
        if problem:
            result.refused.append(problem)
        else:
            result.writes.append((path, text))
    _orphans(rendered, out_dir, matrices, names, result)
    return result


def _refusal(path: Path, data: bytes, text: str, names: Names) -> str | None:
    """Why `path` may not be overwritten with `text`, or None when it may."""
    mine = read(text.encode("utf-8")).owner
    assert mine is not None  # rendered text always has its line
    found = read(data)
    if found.owner is None:
        if data == unstamped(text).encode("utf-8"):
            return None  # the same file without the line: adopted
        return (
            f"{path} has no `{PREFIX.strip()}` ownership line (written by hand or by an older "
            f"imagekit) and differs from what {mine.matrix} renders for cell {mine.cell}; render "
            "never overwrites it: delete it if imagekit should own it, or render into another "
            "folder with --out DIR"
        )
    if not found.intact:
        return _edited(path, found.owner.matrix, "render never overwrites an edit")
    if found.owner.cell != mine.cell:
        return _moved(path, found.owner, "render never overwrites it")
    owner = found.owner.matrix
    if names.rendered_as(owner) is not None or names.gone(owner):
        return None  # ours, or its matrix is rendered too, or gone: nobody else owns it
    return (
        f"{path} belongs to {owner} (its ownership line), and {mine.matrix} renders the same "
        f"cell {mine.cell}; render never overwrites another matrix's file. Give one of the "
        "two images another `repository:` (a cell id is <repository>-<stack>), or render "
        f"{owner} instead, or delete the folder if {owner} no longer builds it, or render "
        "into another folder with --out DIR"
    )


def _edited(path: Path, matrix: str, rule: str) -> str:
    return (
        f"{path} was edited by hand after imagekit rendered it for {matrix} (its sha256 no "
        f"longer matches its ownership line); {rule}. Put the change in {matrix} (apt, pip, "
        f"run, ...), then `git checkout {path}` or delete it, and render again; or render "
        "into another folder with --out DIR"
    )


def _moved(path: Path, owner: Owner, rule: str) -> str:
    return (
        f"{path} is imagekit's file for cell {owner.cell} of {owner.matrix} (its ownership "
        f"line, intact), but it is in folder {path.parent.name}/: the folder was renamed or "
        f"copied by hand; {rule}. Move it back to {path.parent.parent / owner.cell}/ if you "
        "still need it, or delete it, and render again; or render into another folder with "
        "--out DIR"
    )


def _orphans(
    rendered: Mapping[str, str],
    out_dir: Path,
    matrices: Mapping[str, frozenset[str]],
    names: Names,
    result: Plan,
) -> None:
    """Folders whose file names a rendered matrix file that no longer defines its cell, or
    a matrix file deleted from a folder render reads."""
    if not out_dir.is_dir():
        return
    for path in sorted(out_dir.glob("*/Dockerfile")):
        name = path.parent.name
        if name in rendered:
            continue
        found = read(paths.read_checked(path, "Dockerfile") or b"")
        if found.owner is not None:
            _owned_orphan(path, found, matrices, names, result)
        elif found.legacy is not None and found.legacy[1] in matrices:
            _legacy_orphan(path, found.legacy, rendered, matrices, result)


def _owned_orphan(
    path: Path,
    found: Found,
    matrices: Mapping[str, frozenset[str]],
    names: Names,
    result: Plan,
) -> None:
    owner = found.owner
    assert owner is not None
    matrix = names.rendered_as(owner.matrix)
    if matrix is not None:
        if owner.cell in matrices[matrix]:
            return  # a cell merely filtered out
        why = f"its cell left {owner.matrix}"
    elif names.gone(owner.matrix):
        why = f"its matrix {owner.matrix} is gone"
    else:
        return  # another matrix's
    if owner.cell != path.parent.name:
        return  # a copy a person made under another name: theirs
    if not found.intact:
        result.refused.append(
            _edited(path, owner.matrix, f"{why}, but render never deletes an edit")
        )
        return
    result.removals.append((path.parent, why))


def _legacy_orphan(
    path: Path,
    legacy: tuple[str, str],
    rendered: Mapping[str, str],
    matrices: Mapping[str, frozenset[str]],
    result: Plan,
) -> None:
    """An older imagekit's file (ids without the repository): removed where it is exactly
    what that imagekit rendered for a cell rendered now under its new id; else kept."""
    old, matrix = legacy
    successors = [c for c in matrices[matrix] if c.endswith(f"-{old}")]
    if not successors:
        result.kept.append(
            f"{path.parent}/ (an older imagekit rendered it for {matrix}, which no longer "
            "defines its cell; delete it yourself once you have checked it)"
        )
        return
    new = successors[0]
    if new not in rendered:
        return  # filtered out of this render: left for the render that includes it
    body = unstamped(rendered[new]).replace(new, old)
    if paths.read_checked(path, "Dockerfile") == body.encode("utf-8"):
        now = path.parent.parent / new
        result.removals.append((path.parent, f"rendered by an older imagekit; now {now}/"))
        return
    result.kept.append(
        f"{path.parent}/ (an older imagekit rendered it for {matrix}, and it differs from "
        f"that render: it may hold an edit; the cell is now {path.parent.parent / new}/; delete "
        "it yourself once "
        "you have moved what you need)"
    )


def apply(result: Plan, out_dir: Path) -> None:
    """Write every file or none (each to a temp file beside it, then all renamed into place),
    then remove the folders of cells that left."""
    try:
        paths.write_all_or_none(dict(result.writes))
    except OSError as exc:
        raise UsageError(
            f"cannot write under {out_dir}: {exc.strerror} ({exc.filename}); nothing was written"
        ) from None
    for folder, _ in result.removals:
        (folder / "Dockerfile").unlink()
        with contextlib.suppress(OSError):
            folder.rmdir()  # only when nothing else is in it


def refuse(result: Plan) -> None:
    """UsageError (exit 2) naming every file render may not touch; nothing was written."""
    if result.refused:
        count = len(result.refused)
        raise UsageError(
            f"{count} file{'s' if count != 1 else ''} not imagekit's to replace or delete; "
            "nothing was written:",
            *(f"  - {problem}" for problem in result.refused),
        )


def report(result: Plan) -> list[str]:
    return [
        *(f"  wrote {path}" for path, _ in result.writes),
        *(f"  removed {folder}/ ({why})" for folder, why in result.removals),
        *(f"  kept {note}" for note in result.kept),
    ]


def drift(rendered: Mapping[str, str], out_dir: Path, result: Plan) -> list[str]:
    """`render --check`: a diff per file that differs from a fresh render (byte for byte: a
    CRLF or a stray carriage return that hides an instruction from BuildKit is drift too),
    and a line per folder render would remove, refuse or keep."""
    lines: list[str] = []
    for cell_id, text in sorted(rendered.items()):
        path = paths.committed_dockerfile(out_dir, cell_id)
        current = paths.read_checked(path, "Dockerfile") or b""
        if current != text.encode("utf-8"):
            lines.extend(_diff(path, current, text))
    lines += [f"{folder}/: {why}; `imagekit render` removes it" for folder, why in result.removals]
    lines += [f"refused: {problem}" for problem in result.refused]
    lines += [f"{note.replace('/ (', '/: ', 1).removesuffix(')')}" for note in result.kept]
    return lines


def _diff(path: Path, current: bytes, text: str) -> list[str]:
    # split at newlines only: a carriage return stays in its line and shows as \\r
    lines = list(
        difflib.unified_diff(
            current.decode("utf-8", "replace").split("\n"),
            text.split("\n"),
            fromfile=f"{path} (committed)",
            tofile=f"{path} (rendered)",
            lineterm="",
        )
    )
    return lines or [f"{path}: differs in bytes (line endings or a carriage return)"]


def check(
    rendered: Mapping[str, str],
    out_dir: Path,
    matrices: Mapping[str, frozenset[str]],
    root: Path | None = None,
) -> None:
    """StaleError (exit 4) when the committed files drift from a fresh render."""
    lines = drift(rendered, out_dir, plan(rendered, out_dir, matrices, root))
    if lines:
        raise StaleError(
            "committed Dockerfiles are stale; run `imagekit render` and commit the result:",
            *lines,
        )
