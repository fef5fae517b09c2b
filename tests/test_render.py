"""Rendering: whole-file golden tests, determinism, committed files, atomic writes."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from imagekit import paths
from imagekit.errors import StaleError, UsageError
from imagekit.locks.pinned import load_cells
from imagekit.matrix.catalog import Filters, select
from imagekit.paths import write_atomic
from imagekit.render import dockerfile as render_mod
from imagekit.render import owned
from imagekit.render.dockerfile import dockerfile_quote, render, render_all

from .conftest import ROOT

GOLDEN = Path(__file__).parent / "golden"
GOLDEN_CELLS = [
    "pytorch-train-cu126-torch2.7.1-py3.11-debian12-slim",  # the README cell: pip, onnx, system Python
    "pytorch-train-cu128-torch2.10.0-py3.12-ubuntu24.04-nvidia",  # devel builder, flash-attn, multi-node-ib
    "pytorch-train-cu126-torch2.11.0-py3.11-ubuntu24.04-slim",  # uv-managed Python, cu126 index
    "pytorch-train-cu130-torch2.11.0-py3.13-ubuntu24.04-nvidia",  # CUDA 13 line
    "pytorch-train-cu130-torch2.14.1-py3.12-ubuntu24.04-nvidia",  # amd64 + arm64: a runtime stage each
]


@pytest.fixture(scope="module")
def catalog() -> dict[str, object]:
    return {c.id: c for c in load_cells([ROOT / "envs"])}


@pytest.mark.parametrize("cell_id", GOLDEN_CELLS)
def test_whole_dockerfile_matches_golden(catalog: dict[str, object], cell_id: str) -> None:
    text = render(catalog[cell_id])  # type: ignore[arg-type]
    golden = GOLDEN / f"{cell_id}.Dockerfile"
    if os.environ.get("IMAGEKIT_UPDATE_GOLDEN") == "1":
        golden.write_text(text, encoding="utf-8")
    assert text == golden.read_text(encoding="utf-8")


def test_test_cell_matches_golden() -> None:
    (cell,) = load_cells([ROOT / "tests" / "data" / "envs"])
    text = render(cell)
    golden = GOLDEN / f"{cell.id}.Dockerfile"
    if os.environ.get("IMAGEKIT_UPDATE_GOLDEN") == "1":
        golden.write_text(text, encoding="utf-8")
    assert text == golden.read_text(encoding="utf-8")
    assert "COPY --chown=1000:1000 source/ /workspace/" in text.splitlines()[-1]


def test_structure_of_the_readme_cell(catalog: dict[str, object]) -> None:
    text = render(catalog["pytorch-train-cu126-torch2.7.1-py3.11-debian12-slim"])  # type: ignore[arg-type]
    lines = text.splitlines()
    assert not text.startswith("# syntax")  # Docker 20.10's built-in frontend only
    stages = [line for line in lines if line.startswith("FROM ")]
    # the builder starts from os-base: one apt pass per cell, none on a base that holds
    # the packages (it checks dpkg's database first)
    assert stages == [
        "FROM debian:bookworm-slim AS os-base",
        "FROM os-base AS builder",
        "FROM builder AS sbom-tool",
        "FROM os-base AS runtime",
    ]
    assert text.count("apt-get update") == 1
    assert text.count("sharing=locked") == 2  # apt's caches (os-base's one step): apt locks
    assert "id=imagekit-apt-cache-debian12," in text and "-builder," not in text
    apt = text.split("touch /tmp/imagekit-started", 1)[1].split("apt-get update")[0]
    assert "dpkg-query -W" in apt and '!= "ii ii ii ii ii " ]; then' in apt  # all five: no apt
    # concurrent builds (--jobs) never wait on an installer cache: pip private, uv shared
    assert "id=imagekit-pip,target=/root/.cache/pip,sharing=private" in text
    assert "sharing=locked" not in "".join(ln for ln in lines if "cache/pip" in ln)
    # the SBOM tool's stage runs beside the runtime's installs: a cache of its own (with
    # pip's private sharing one of the two would get an empty second instance)
    sbom_tool = text.split("AS sbom-tool")[1].split("\nFROM ")[0]
    runtime = text.split("AS runtime")[1]
    assert "id=imagekit-uv-sbom-tool,target=/root/.cache/uv," in sbom_tool
    assert "id=imagekit-uv-sbom-tool" not in runtime and "id=imagekit-uv," in runtime
    assert "--mount=type=secret,id=ca" in text and "/etc/ssl" not in text
    # least-changing first: torch before features before the user's pip packages
    assert text.index("torch==2.7.1") < text.index("onnx>=1.16") < text.index("numpy<3")
    assert lines.index("USER 1000:1000") > lines.index("COPY --from=builder /opt/venv /opt/venv")


def test_pip_packages_install_in_the_runtime_after_the_builder_venv(
    catalog: dict[str, object],
) -> None:
    """Adding a package must not re-copy torch: the runtime copies the builder's venv (torch,
    features), then installs the pip packages in place, so their layer is exactly their
    change. Bytecode comes from pyc_cache.py and its cache mount; torch compiles as usual."""
    # the README cell with pip, whose steps are the easier to read here (uv: same layout)
    cell = replace(catalog["pytorch-train-cu126-torch2.7.1-py3.11-debian12-slim"], installer="pip")  # type: ignore[type-var]
    text = render(cell)
    builder, runtime = text.split(" AS builder")[1].split("FROM os-base AS runtime")
    builder = builder.split("FROM builder AS sbom-tool")[0]
    assert "torch==2.7.1" in builder and "numpy<3" not in builder
    lines = runtime.splitlines()
    venv = lines.index("COPY --from=builder /opt/venv /opt/venv")
    install = next(i for i, line in enumerate(lines) if "'numpy<3'" in line)
    assert venv < install < lines.index("USER 1000:1000")
    step = runtime[runtime.rindex("RUN ", 0, runtime.index("'numpy<3'")) :].split("\nENV ")[0]
    assert "/opt/venv/bin/pip install --find-links /wheelhouse --no-compile" in step
    assert 'pyc_cache.py --since "$started" /opt/venv /root/.cache/imagekit-pyc' in step
    assert "--mount=type=secret,id=ca" in step and "imagekit-delta" not in text
    assert "--no-compile" not in builder
    baseline = render(cell, cache_mounts=False)
    assert "imagekit-pyc" not in baseline and '--since "$started" /opt/venv\n' in baseline


def test_uv_runs_in_the_runtime_from_the_builder(catalog: dict[str, object]) -> None:
    """The runtime has no uv of its own: the install step mounts the builder's, read-only."""
    text = render(catalog["pytorch-train-cu126-torch2.11.0-py3.11-ubuntu24.04-slim"])  # type: ignore[arg-type]
    runtime = text.split("FROM os-base AS runtime")[1]
    assert "--mount=type=bind,from=builder,source=/opt/uv,target=/opt/uv" in runtime
    assert "/opt/uv/bin/uv pip install --python /opt/venv/bin/python" in runtime
    assert "COPY --from=builder /opt/uv" not in runtime


def test_with_build_apt_pip_packages_reach_the_runtime_as_a_delta(tmp_path: Path) -> None:
    """With build_apt (a compiler for sdists) the pip packages build in a packages stage on
    the builder; the runtime deletes and copies only what that stage changed."""
    (tmp_path / "m.yaml").write_text(
        "defaults:\n  installer: pip\n  pip: [crcmod]\n  build_apt: [build-essential]\n"
        "matrix:\n  - {cuda: cpu, torch: '2.13.0', python: '3.11', os: debian12, flavor: slim}\n"
    )
    (cell,) = load_cells([tmp_path])
    text = render(cell)
    builder, rest = text.split("FROM os-base AS builder")[1].split("FROM builder AS packages")
    packages, runtime = rest.split("FROM os-base AS runtime")
    assert "crcmod" not in builder and "       crcmod" in packages
    assert "/opt/imagekit-delta" in packages and "--no-compile" in packages
    assert "from=builder,source=/opt/venv,target=/run/imagekit/base-venv" in packages
    assert 'pyc_cache.py --since "$started" /opt/venv /root/.cache/imagekit-pyc' in packages
    copies = [line for line in runtime.splitlines() if "from=" in line]
    assert copies[0] == "COPY --from=builder /opt/venv /opt/venv"
    assert "from=packages,source=/opt/imagekit-delta" in copies[1]  # the removals
    assert copies[2] == "COPY --from=packages /opt/imagekit-delta/root/ /"
    assert "crcmod" not in runtime and "build-essential" not in runtime


def test_a_cell_without_pip_packages_has_no_packages_stage() -> None:
    (cell,) = load_cells([ROOT / "tests" / "data" / "envs"])
    text = render(cell)
    assert "AS packages" not in text and "imagekit-delta" not in text


def test_syntax_line_is_opt_in(catalog: dict[str, object]) -> None:
    cell = catalog[GOLDEN_CELLS[0]]
    text = render(cell, syntax="docker/dockerfile:1.7")  # type: ignore[arg-type]
    assert text.startswith("# syntax=docker/dockerfile:1.7\n")


def test_committed_dockerfiles_are_current() -> None:
    every = load_cells([ROOT / "envs"])
    owners = render_mod.matrices(every, [ROOT / "envs" / "training.yaml"], ROOT)
    owned.check(render_all(every, root=ROOT), ROOT / "dockerfiles", owners)


def write_cells(cells: list[object], out: Path) -> tuple[dict[str, str], dict[str, frozenset[str]]]:
    """Render `cells` into `out` (a folder of a repository at out's parent) as the command
    does; returns what was rendered and the matrix files' cells."""
    (out.parent / ".git").mkdir(exist_ok=True)
    rendered = render_all(cells, root=out.parent)  # type: ignore[arg-type]
    owners = render_mod.matrices(cells, [], out.parent)  # type: ignore[arg-type]
    result = owned.plan(rendered, out, owners)
    owned.refuse(result)
    owned.apply(result, out)
    return rendered, owners


def test_check_reports_a_diff_and_orphans(tmp_path: Path, catalog: dict[str, object]) -> None:
    out = tmp_path / "dockerfiles"
    rendered, owners = write_cells([catalog[GOLDEN_CELLS[0]], catalog[GOLDEN_CELLS[1]]], out)
    owned.check(rendered, out, owners)
    (out / "hand-made").mkdir()
    (out / "hand-made" / "Dockerfile").write_text("FROM scratch\n")  # not ours
    # the second cell leaves the matrix: its folder is an orphan
    kept = [catalog[GOLDEN_CELLS[0]]]
    rendered = render_all(kept, root=tmp_path)  # type: ignore[arg-type]
    owners = render_mod.matrices(kept, [], tmp_path)  # type: ignore[arg-type]
    (matrix,) = owners
    path = out / GOLDEN_CELLS[0] / "Dockerfile"
    path.write_text(path.read_text().replace("numpy<3", "numpy<2"))
    with pytest.raises(StaleError) as info:
        owned.check(rendered, out, owners)
    said = str(info.value)
    assert "-       'numpy<2'" in said and "+       'numpy<3'" in said
    assert f"{out / GOLDEN_CELLS[1]}/: its cell left {matrix}" in said
    assert "was edited by hand" in said and "hand-made" not in said
    # the edit is refused (exit 2), nothing written, nothing pruned
    result = owned.plan(rendered, out, owners)
    with pytest.raises(UsageError, match="edited by hand"):
        owned.refuse(result)
    path.write_text(path.read_text().replace("numpy<2", "numpy<3"))  # the edit undone
    result = owned.plan(rendered, out, owners)
    owned.refuse(result)
    owned.apply(result, out)
    assert result.removals == [(out / GOLDEN_CELLS[1], f"its cell left {matrix}")]
    assert not (out / GOLDEN_CELLS[1]).exists()
    assert (out / "hand-made" / "Dockerfile").is_file()
    owned.check(rendered, out, owners)


@pytest.mark.parametrize("corrupt", [b"\r\n", b"\r"])
def test_check_compares_bytes(tmp_path: Path, catalog: dict[str, object], corrupt: bytes) -> None:
    """A CRLF or a stray carriage return is drift, and an edit: render refuses it."""
    out = tmp_path / "dockerfiles"
    rendered, owners = write_cells([catalog[GOLDEN_CELLS[0]]], out)
    path = out / GOLDEN_CELLS[0] / "Dockerfile"
    data = path.read_bytes()
    if corrupt == b"\r\n":
        path.write_bytes(data.replace(b"\n", b"\r\n"))
    else:  # one newline before an ARG becomes \r: BuildKit would read both lines as one
        at = data.index(b"\nARG ")
        path.write_bytes(data[:at] + b"\r" + data[at + 1 :])
    with pytest.raises(StaleError):
        owned.check(rendered, out, owners)
    assert owned.plan(rendered, out, owners).refused


def test_render_writes_all_cells_or_none(
    tmp_path: Path, catalog: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    cells = [catalog[c] for c in GOLDEN_CELLS[:3]]
    real = paths.temp_beside

    def full_disk(path: Path, text: str) -> Path:
        if path.parent.name == GOLDEN_CELLS[2]:  # the last one cannot be written
            raise OSError(28, "No space left on device", str(path))
        return real(path, text)

    monkeypatch.setattr(paths, "temp_beside", full_disk)
    with pytest.raises(UsageError, match="No space left on device.*nothing was written"):
        write_cells(cells, tmp_path / "dockerfiles")
    assert not list(tmp_path.rglob("Dockerfile"))  # the first two were not renamed in
    assert not list(tmp_path.rglob(".Dockerfile.*"))  # and no temp file is left


def test_atomic_write_leaves_old_file_on_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "cell" / "Dockerfile"
    assert write_atomic(path, "FROM a\n") is True
    assert write_atomic(path, "FROM a\n") is False  # unchanged: not rewritten

    def boom(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(path, "FROM b\n")
    assert path.read_text() == "FROM a\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["Dockerfile"]  # no temp left


def test_dockerfile_quote() -> None:
    assert dockerfile_quote('a "b" \\ $c') == '"a \\"b\\" \\\\ \\$c"'
    with pytest.raises(ValueError, match="one line"):
        dockerfile_quote("a\nRUN evil")


_names = st.lists(st.sampled_from(["git", "curl", "vim", "htop", "jq", "less"]), unique=True)
_reqs = st.lists(st.sampled_from(["numpy<3", "tqdm", "scipy>=1.10", "rich", "pyyaml"]), unique=True)
_env = st.dictionaries(st.sampled_from(["A", "B", "C_D", "E"]), st.text("abc:=/ ", max_size=8))


@settings(max_examples=40, deadline=None)
@given(apt=_names, pip=_reqs, env=_env)
def test_rendering_is_deterministic_and_order_free(
    tmp_path_factory: pytest.TempPathFactory, apt: list[str], pip: list[str], env: dict[str, str]
) -> None:
    import json

    folder = tmp_path_factory.mktemp("envs")

    def write(order: Callable[[list[str]], list[str]]) -> str:
        (folder / "m.yaml").write_text(
            "defaults:\n"
            f"  apt: {json.dumps(order(apt))}\n  pip: {json.dumps(order(pip))}\n"
            f"  env: {json.dumps(env_in_order(env, order))}\n"
            "matrix:\n  - {cuda: '12.6', torch: '2.7.1', python: '3.11',"
            " os: debian12, flavor: slim}\n"
        )
        (cell,) = load_cells([folder])
        return render(cell)

    first = write(list)
    assert write(list) == first  # same input, same bytes
    assert write(reversed_) == first  # order of lists and maps does not matter


def env_in_order(env: dict[str, str], order: Callable[[list[str]], list[str]]) -> dict[str, str]:
    return {key: env[key] for key in order(list(env))}


def reversed_(items: list[str]) -> list[str]:
    return list(reversed(items))


def test_filters_select_by_prefix(catalog: dict[str, object]) -> None:
    cells = list(catalog.values())
    chosen = select(cells, Filters(cuda=("12.6",), torch=("2.7",), flavor=("slim",)))  # type: ignore[arg-type]
    assert {c.id for c in chosen} == {  # type: ignore[attr-defined]
        "pytorch-train-cu126-torch2.7.1-py3.11-debian12-slim",
        "pytorch-train-cu126-torch2.7.1-py3.11-ubuntu24.04-slim",
        "pytorch-train-cu126-torch2.7.1-py3.12-ubuntu24.04-slim",
    }
    # a --cell glob matches the whole id or the stack part alone
    by_stack = select(cells, Filters(cell=("cu126-torch2.7.1-*-slim",)))  # type: ignore[arg-type]
    by_id = select(cells, Filters(cell=("pytorch-train-cu126-torch2.7.1-*-slim",)))  # type: ignore[arg-type]
    assert by_stack == by_id == chosen
    assert not select_or_none(cells, Filters(cell=("train-cu126-*",)))


def test_benchmark_baseline_drops_only_the_installer_cache(catalog: dict[str, object]) -> None:
    cell = replace(catalog[GOLDEN_CELLS[0]], installer="pip")  # type: ignore[type-var]
    with_cache = render(cell)
    without = render(cell, cache_mounts=False)
    assert "target=/root/.cache/pip" in with_cache and "target=/root/.cache/pip" not in without
    assert without.count("--no-cache-dir") == with_cache.count("/opt/venv/bin/pip install")
    assert "target=/var/cache/apt" in without  # apt keeps its cache mounts


def test_build_apt_reaches_the_builder_stage_only(tmp_path: Path) -> None:
    (tmp_path / "m.yaml").write_text(
        "defaults:\n  apt: [jq]\n  build_apt: [build-essential, cmake]\n"
        "matrix:\n  - {cuda: cpu, torch: '2.13.0', python: '3.11', os: debian12, flavor: slim}\n"
    )
    (cell,) = load_cells([tmp_path])
    text = render(cell)
    builder, runtime = text.split(" AS builder")[1].split("FROM os-base AS runtime")
    os_base = text.split("FROM os-base AS builder")[0]
    assert "       cmake" in builder and "       build-essential" in builder
    assert "cmake" not in runtime and "cmake" not in os_base
    assert "       jq" in runtime and "jq" not in builder


def select_or_none(cells: list[object], filters: Filters) -> list[object]:
    try:
        return select(cells, filters)  # type: ignore[arg-type]
    except UsageError:
        return []
