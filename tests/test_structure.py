"""The shape of the code, held by tests: no module over 500 lines and no function over 60, no
import that runs back up (a cycle between two folders of imagekit/, or between two modules),
the benches importing no test helper, and each folder's opening comment as docs/architecture.md
names its purpose."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "imagekit"
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60


def sources(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (ROOT / folder).rglob("*.py"))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> Iterator[str]:
    """Every module a file imports, lazy imports inside functions too; `from a import b`
    yields a.b as well, for b may be a module."""
    package = module_name(path).rsplit(".", 1)[0] if path.name != "__init__.py" else None
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = (package or module_name(path)).split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def graph(folders: tuple[str, ...]) -> dict[str, set[str]]:
    files = {module_name(p): p for p in sources(*folders)}
    return {
        name: {target for target in imports_of(path) if target in files and target != name}
        for name, path in files.items()
    }


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(edges.get(node, ())):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            part = []
            while True:
                top = stack.pop()
                part.append(top)
                if top == node:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def folder_of(module: str) -> str:
    """imagekit.engine.docker -> imagekit.engine; a module at the package's top is its own."""
    parts = module.split(".")
    return ".".join(parts[:2])


def test_no_import_cycle_between_modules() -> None:
    assert cycles(graph(("imagekit",))) == []


def test_no_import_runs_back_up_between_folders() -> None:
    folders: dict[str, set[str]] = {}
    for module, targets in graph(("imagekit",)).items():
        mine = folder_of(module)
        folders.setdefault(mine, set()).update(
            folder_of(t) for t in targets if folder_of(t) != mine
        )
    assert cycles(folders) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _lines(path: Path) -> int:
    return path.read_text().count("\n")


def test_no_module_over_500_lines() -> None:
    big = [f"{p.relative_to(ROOT)} {_lines(p)}" for p in sources("imagekit") if _lines(p) > 500]
    assert big == []


def test_no_function_over_60_lines() -> None:
    long = [
        f"{p.relative_to(ROOT)}:{node.lineno} {node.name} {node.end_lineno - node.lineno + 1}"
        for p in sources("imagekit", "bench", "devkit", "scripts")
        for node in ast.walk(ast.parse(p.read_text(), str(p)))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and (node.end_lineno or node.lineno) - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert long == []


@pytest.mark.parametrize("folder", ["bench", "devkit"])
def test_benches_and_dev_helpers_import_no_test_module(folder: str) -> None:
    reaching = [
        f"{p.relative_to(ROOT)} imports {name}"
        for p in sources(folder)
        for name in imports_of(p)
        if name == "tests" or name.startswith("tests.")
    ]
    assert reaching == []
    hacks = [str(p.relative_to(ROOT)) for p in sources(folder) if "sys.path" in p.read_text()]
    assert hacks == []


def first_sentence(path: Path) -> str:
    """A module's opening comment's first sentence, as one line of words."""
    doc = " ".join((ast.get_docstring(ast.parse(path.read_text())) or "").split())
    match = re.match(r"(.+?[.!?])(\s|$)", doc)
    return match.group(1) if match else doc


ARCHITECTURE = ROOT / "docs" / "architecture.md"


def folder_rows() -> dict[str, str]:
    """docs/architecture.md's table of folders: `imagekit/<folder>/` -> its purpose."""
    rows = re.findall(r"^\| `(imagekit/[\w/]+/)` \| (.+?) \|$", ARCHITECTURE.read_text(), re.M)
    return dict(rows)


def test_every_folder_has_its_opening_comment_as_its_row_in_the_architecture() -> None:
    folders = sorted(f"{p.parent.relative_to(ROOT)}/" for p in PACKAGE.rglob("__init__.py"))
    rows = folder_rows()
    assert sorted(rows) == [f for f in folders if f != "imagekit/"]
    for folder, purpose in rows.items():
        said = first_sentence(ROOT / folder / "__init__.py")
        assert said, f"{folder}__init__.py opens with no comment"
        assert purpose == said.replace("|", "/"), folder


def test_every_module_the_architecture_names_exists() -> None:
    """A path like `builder/build_runner.py` or `imagekit/engine/docker.py` names a file of
    the package (or of the repository); a bare `name.py` names one somewhere in imagekit/."""
    text = ARCHITECTURE.read_text()
    names = set(re.findall(r"`((?:[\w.-]+/)*[\w-]+\.py)`", text))
    names |= set(re.findall(r"(?<![\w/`])((?:[a-z_]+/)+[a-z_]+\.py)", text))
    by_name = {p.name for p in PACKAGE.rglob("*.py")}
    missing = [
        name
        for name in sorted(names)
        if not (ROOT / name).is_file()
        and not (PACKAGE / name).is_file()
        and not any(PACKAGE.glob(f"*/{name}"))
        and not ("/" not in name and name in by_name)
    ]
    assert missing == []


REGISTRY_MODULES = ("engine/image_registry.py", "engine/referrers.py")


def test_only_the_registry_modules_run_the_registry_tools() -> None:
    """Every registry read and write (oras, cosign) goes through engine/image_registry.py
    (an image: manifests, blobs) or engine/referrers.py (what refers to it: the SBOM
    artifact, the signed attestation); the daemon's own push and pull are engine's too."""
    running = [
        str(p.relative_to(PACKAGE))
        for p in sources("imagekit")
        if "tools.run(" in p.read_text()
        and str(p.relative_to(PACKAGE)) not in (*REGISTRY_MODULES, "engine/tools.py")
    ]
    assert running == []
