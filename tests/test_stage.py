"""`imagekit stage` on the real catalog: the contexts a bake file points at, with every file
the committed Dockerfiles copy or bind-mount from them (README: `imagekit stage && imagekit
matrix --format bake > docker-bake.json`, then `docker buildx bake`). Builds nothing."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import dockerfile
import pytest

from imagekit.builder.context import script_text
from imagekit.cli import main
from imagekit.render.dockerfile import LAYER_EPOCH

from .conftest import ROOT

PACKAGE = ROOT / "imagekit"
WHEEL = "flash_attn-2.8.3-cp312-cp312-linux_x86_64.whl"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    out, err = capsys.readouterr()
    assert exited.value.code == 0, err
    return out


def context_sources(path: Path) -> set[str]:
    """What a Dockerfile takes from its build context: COPY sources (not --from a stage)
    and bind mounts (not from= a stage or image)."""
    found = set()
    for command in dockerfile.parse_file(str(path)):
        if command.cmd == "COPY" and not any(f.startswith("--from=") for f in command.flags):
            found.update(command.value[:-1])
        for flag in command.flags:
            if flag.startswith("--mount=type=bind,"):
                fields = dict(f.split("=", 1) for f in flag.removeprefix("--mount=").split(","))
                if "from" not in fields:
                    found.add(fields["source"])
    return found


def files_under(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


def check_helpers(context: Path, labels: dict[str, str]) -> None:
    """The imagekit/ folder of a context: helpers as they are in the package and templates,
    the stdlib-only packages the image runs, the cell's labels, the fixed-date /etc files."""
    helpers = context / "imagekit"
    for name in ("build-env.sh", "entrypoint.sh"):
        assert (helpers / name).read_bytes() == (ROOT / "templates" / "context" / name).read_bytes()
    assert os.stat(helpers / "entrypoint.sh").st_mode & 0o111  # the image's ENTRYPOINT
    for name in ("pyc_cache.py", "venv_delta.py"):
        assert (helpers / name).read_bytes() == (PACKAGE / "buildtime" / name).read_bytes()
    for name in ("groups.py", "sbom_writer.py", "team_install.py"):  # lockfile.py's lines inlined
        assert (helpers / name).read_bytes() == script_text(name).encode("utf-8")
    lib = helpers / "lib" / "imagekit"
    assert (lib / "__init__.py").read_bytes() == (PACKAGE / "__init__.py").read_bytes()
    for package in ("contract", "selfcheck", "runtime"):
        copied = files_under(lib / package)
        assert copied == files_under(PACKAGE / package) and "__main__.py" in files_under(
            lib / "selfcheck"
        )
    assert not list(lib.rglob("__pycache__"))
    pth = (helpers / "lib" / "imagekit-threads.pth").read_text()
    assert pth.startswith("import imagekit.runtime.threads") and pth.count("\n") == 1
    own = {k: v for k, v in labels.items() if k.startswith("io.imagekit.")}
    assert own and json.loads((helpers / "labels.json").read_text()) == own
    for name in ("hosts", "resolv.conf"):
        etc = helpers / "etc" / name
        assert etc.read_bytes() == b"" and etc.stat().st_mtime == LAYER_EPOCH
    assert list((helpers / "locked").iterdir()) == []  # the catalog has no package lock
    assert list((context / "source").iterdir()) == []  # and no `source:` folder


def test_stage_writes_every_context_the_bake_file_points_at(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for folder in ("envs", "dockerfiles"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    wheelhouse = tmp_path / "wheels"
    wheelhouse.mkdir()
    (wheelhouse / WHEEL).write_bytes(b"a prebuilt wheel")
    monkeypatch.chdir(tmp_path)

    said = run(capsys, "stage", "--cuda", "12.8", "--wheelhouse", str(wheelhouse))
    targets = json.loads(run(capsys, "matrix", "--format", "bake", "--cuda", "12.8"))["target"]
    assert len(targets) == 12  # 12.8: torch 2.8-2.10 x Python 3.11-3.12 x two flavors
    assert said == f"staged {len(targets)} contexts under .imagekit/context/\n"
    contexts = sorted((tmp_path / ".imagekit" / "context").iterdir())
    assert [c.relative_to(tmp_path).as_posix() for c in contexts] == sorted(
        t["context"] for t in targets.values()
    )
    used: set[str] = set()
    for target in targets.values():
        context = tmp_path / target["context"]
        committed = tmp_path / "dockerfiles" / context.name / "Dockerfile"
        assert (context / target["dockerfile"]).resolve() == committed.resolve()
        sources = context_sources(committed)
        missing = [s for s in sources if not (context / s).exists()]
        assert not missing, f"{context.name}: its Dockerfile takes {missing}, not staged"
        used |= sources
        check_helpers(context, target["labels"])
        assert (context / "wheelhouse" / WHEEL).read_bytes() == b"a prebuilt wheel"
    # the parse above saw the mounts and copies that matter, so the check is not vacuous
    assert {
        "imagekit/build-env.sh",
        "imagekit/groups.py",
        "imagekit/locked",
        "imagekit/pyc_cache.py",
        "imagekit/lib/imagekit",
        "imagekit/labels.json",
        "imagekit/etc/",
        "wheelhouse",
    } <= used


def test_stage_again_replaces_a_context_rather_than_adding_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(ROOT / "envs", tmp_path / "envs")
    monkeypatch.chdir(tmp_path)
    wheelhouse = tmp_path / "wheels"
    wheelhouse.mkdir()
    (wheelhouse / WHEEL).write_bytes(b"old")
    filters = ("--cuda", "13.0", "--torch", "2.11.0", "--python", "3.12", "--flavor", "slim")
    run(capsys, "stage", *filters, "--wheelhouse", str(wheelhouse))
    (context,) = (tmp_path / ".imagekit" / "context").iterdir()
    (context / "imagekit" / "left-over.txt").write_text("from an older imagekit")
    assert run(capsys, "stage", *filters) == "staged 1 contexts under .imagekit/context/\n"
    assert not (context / "imagekit" / "left-over.txt").exists()
    assert list((context / "wheelhouse").iterdir()) == []  # no --wheelhouse this time
    assert (context / "imagekit" / "labels.json").is_file()


def test_scripts_are_parsed_one_at_a_time_when_cells_stage_side_by_side(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """CPython 3.11's ast.parse fails now and then in two threads at once ("AST constructor
    recursion depth mismatch"); cells stage side by side with --jobs, so no two parses
    may overlap."""
    import ast
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    inside, most, lock = [0], [0], threading.Lock()
    parse = ast.parse

    def watched(*args: Any, **kwargs: Any) -> ast.Module:
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.02)
        try:
            return parse(*args, **kwargs)
        finally:
            with lock:
                inside[0] -= 1

    monkeypatch.setattr(ast, "parse", watched)
    with ThreadPoolExecutor(4) as pool:
        texts = list(pool.map(script_text, ["groups.py"] * 8))
    assert most[0] == 1 and len(set(texts)) == 1
