"""The tree's names and layers: one file name per module, and no function called just
`table`, so a name found in a traceback, an import or a grep leads to one place; and which
package may import which (docs/architecture.md, "Rules that keep it this way")."""

from __future__ import annotations

import ast
import importlib.util
import sys
from collections import defaultdict
from pathlib import Path

import pytest

from imagekit.builder.context import script_text
from imagekit.imagetest.nodes_plan import NodesOptions, torchrun_command

from .test_contract import imported

PACKAGE = Path(__file__).resolve().parents[1] / "imagekit"
# Package markers, not modules anyone names.
MARKERS = {"__init__.py", "__main__.py"}


def modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p.name not in MARKERS)


def shared_names(paths: list[Path]) -> dict[str, list[str]]:
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in paths:
        by_name[path.name].append(str(path.relative_to(PACKAGE.parent)))
    return {name: places for name, places in by_name.items() if len(places) > 1}


def test_no_two_modules_share_a_file_name() -> None:
    assert len(modules()) > 50  # the glob really reached the package
    assert shared_names(modules()) == {}


def test_the_check_finds_a_shared_name() -> None:
    twins = [PACKAGE / "builder" / "runner.py", PACKAGE / "selfcheck" / "runner.py"]
    assert shared_names(twins) == {
        "runner.py": ["imagekit/builder/runner.py", "imagekit/selfcheck/runner.py"]
    }


def test_no_function_is_named_only_table() -> None:
    vague = {"table", "tables"}
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}"
        for path in modules()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef) and node.name in vague
    ]
    assert found == []


def test_the_node_command_runs_a_module_that_exists() -> None:
    command = torchrun_command("imagekit-0abc1234", "node0:29400", NodesOptions(nodes=2))
    module = command[command.index("-m") + 1]
    assert module == "imagekit.selfcheck.nodes_check"
    assert importlib.util.find_spec(module) is not None


# What matrix, render and launch (and locks/, which pins what the matrix names) may not
# import: the host's build orchestration, the engine, the CLI.
HOST_ONLY = ("imagekit.builder", "imagekit.engine", "imagekit.cli")


@pytest.mark.parametrize("package", ["matrix", "render", "launch", "locks"])
def test_the_model_layers_do_not_import_build_engine_or_cli(package: str) -> None:
    found = [
        f"{path.relative_to(PACKAGE.parent)} imports {name}"
        for path in sorted((PACKAGE / package).rglob("*.py"))
        for name in sorted(imported(path))
        if name.startswith(HOST_ONLY)
    ]
    assert found == []


def test_the_matrix_does_not_import_the_locks() -> None:
    """locks/ reads and checks what the matrix names (cells, image references), so the
    matrix never imports locks/: locks/pinned.py joins the two."""
    found = [
        f"{path.relative_to(PACKAGE.parent)} imports {name}"
        for path in sorted((PACKAGE / "matrix").rglob("*.py"))
        for name in sorted(imported(path))
        if name.startswith("imagekit.locks")
    ]
    assert found == []


SBOM_WRITER_LIBRARIES = {"cyclonedx", "packageurl"}


def test_the_in_build_scripts_import_only_the_standard_library(tmp_path: Path) -> None:
    """buildtime/'s scripts run inside the image build with the image's Python, where no
    imagekit package is importable: each as builder/context.py copies it into the context
    (an import of buildtime/lockfile.py replaced by its lines), lockfile.py as it is."""
    scripts = []
    for source in sorted((PACKAGE / "buildtime").glob("*.py")):
        scripts.append(tmp_path / source.name)
        scripts[-1].write_text(script_text(source.name))
    assert {p.name for p in scripts} >= {"groups.py", "pyc_cache.py", "venv_delta.py"}
    # the one exception: the SBOM writer's library, mounted for its one step (sbom-tool)
    found = [
        f"buildtime/{path.name} imports {name}"
        for path in scripts
        for name in sorted(imported(path))
        if name.split(".")[0] not in sys.stdlib_module_names
        and not (path.name == "sbom_writer.py" and name.split(".")[0] in SBOM_WRITER_LIBRARIES)
    ]
    assert found == []
