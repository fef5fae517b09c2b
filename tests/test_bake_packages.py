"""One apt pass per cell, or none (issue 54): the builder starts from os-base, which installs
what both stages need; `imagekit base bootstrap --bake-packages` puts those packages into the
base, and the apt step then checks dpkg's database and installs nothing."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace
from typing import Any

import pytest
from click.testing import CliRunner

from imagekit.builder import bases
from imagekit.cli import cli, main
from imagekit.errors import UsageError
from imagekit.locks.pinned import load_cells
from imagekit.render.dockerfile import _environment, base_packages, builder_apt
from imagekit.resources import templates_dir

from .conftest import ROOT

README_CELL = "pytorch-train-cu126-torch2.7.1-py3.11-debian12-slim"


@pytest.fixture(scope="module")
def catalog() -> dict[str, Any]:
    return {cell.id: cell for cell in load_cells([ROOT / "envs"])}


def test_the_builder_installs_nothing_os_base_has(catalog: dict[str, Any]) -> None:
    cell = catalog[README_CELL]
    assert base_packages(cell) == [
        "ca-certificates", "g++", "libpython3.11-dev", "python3", "python3-venv"
    ]  # fmt: skip
    assert builder_apt(cell) == []
    # a cell with uv's own Python still gets the OS Python the builder bootstraps uv with
    managed = catalog["pytorch-train-cu126-torch2.11.0-py3.11-ubuntu24.04-slim"]
    assert {"python3", "python3-venv"} <= set(base_packages(managed))
    assert builder_apt(managed) == []


def test_a_builder_on_a_devel_image_keeps_its_own_apt_step(catalog: dict[str, Any]) -> None:
    devel = catalog["pytorch-train-cu128-torch2.10.0-py3.12-ubuntu24.04-nvidia"]
    assert devel.builder_image and "build-essential" in builder_apt(devel)


def test_bake_packages_takes_the_cells_on_the_suites_image(catalog: dict[str, Any]) -> None:
    cells = list(catalog.values())
    packages = bases.baked_packages(cells, {"debian:bookworm-slim", "mirror.internal/base:1"})
    assert packages == base_packages(catalog[README_CELL])


def test_bake_packages_without_a_cell_on_that_base_is_refused_naming_the_bases(
    catalog: dict[str, Any],
) -> None:
    with pytest.raises(UsageError) as caught:
        bases.baked_packages(list(catalog.values()), {"debian:trixie-slim"})
    text = str(caught.value)
    assert "no cell of the matrix builds on debian:trixie-slim" in text
    assert "debian:bookworm-slim" in text and "Fix:" in text


def test_the_cli_hands_the_packages_to_debootstrap(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[list[str]] = []

    def run(args: list[str], **_: Any) -> SimpleNamespace:
        made.append(args)
        return SimpleNamespace(returncode=0, stdout="", stderr="")

    monkeypatch.setattr(bases.shutil, "which", lambda name: f"/usr/sbin/{name}")
    monkeypatch.setattr(bases.os, "geteuid", lambda: 0)
    monkeypatch.setattr(bases.subprocess, "run", run)
    monkeypatch.setattr("imagekit.engine.docker.DockerEngine.import_rootfs",
                        lambda self, root, tag, platform: "sha256:made")  # fmt: skip
    monkeypatch.setattr(bases, "check_platforms", lambda engine, platforms: None)
    monkeypatch.setattr("imagekit.engine.docker.DockerEngine.__init__", lambda self, cli=None: None)
    args = ["base", "bootstrap", "--bake-packages", "--envs", str(ROOT / "envs")]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert "baking in ca-certificates g++ libpython3.11-dev python3 python3-venv" in result.output
    (debootstrap,) = made
    assert "--include=ca-certificates,g++,libpython3.11-dev,python3,python3-venv" in debootstrap


def test_bake_packages_with_a_matrix_lacking_the_base_exits_2_and_makes_nothing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["base", "bootstrap", "--bake-packages", "--suite", "trixie",
            "--envs", str(ROOT / "envs")]  # fmt: skip
    with pytest.raises(SystemExit) as info:
        main(args)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "--bake-packages: no cell of the matrix builds on debian:trixie-slim" in err


def apt_step(packages: list[str]) -> str:
    """The apt step's shell command as the template renders it, its apt-get calls echoed."""
    env = _environment(str(templates_dir()))
    source = '{% from "stages/macros.j2" import apt_install with context %}{{ apt_install(p) }}'
    text = env.from_string(source).render(p=packages, cell=SimpleNamespace(os="debian12"),
                                          layer_epoch=315532800)  # fmt: skip
    command = text.split("touch /tmp/imagekit-started \\\n    && ", 1)[1].split(
        " \\\n    && for log"
    )[0]
    command = command.replace("apt-get update", "echo APT-UPDATE")
    return command.replace("DEBIAN_FRONTEND=noninteractive apt-get install", "echo APT-INSTALL")


@pytest.mark.subprocess
@pytest.mark.parametrize(
    ("packages", "runs_apt"),
    [
        (["dpkg", "bash"], False),  # both installed here (a Debian host): nothing to do
        (["dpkg", "imagekit-no-such-package"], True),  # one unknown: apt runs
        (["dpkg"] * 2, True),  # a count that cannot match: apt runs, never a wrong skip
    ],
)
def test_the_apt_step_runs_apt_only_for_what_dpkg_lacks(
    packages: list[str], runs_apt: bool
) -> None:
    out = subprocess.run(["sh", "-c", apt_step(packages)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert ("APT-UPDATE" in out.stdout and "APT-INSTALL" in out.stdout) is runs_apt
