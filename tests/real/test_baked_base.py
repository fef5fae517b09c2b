"""A base with the OS packages baked in (issue 54): `imagekit base bootstrap --bake-packages`
debootstraps the packages the test cell's os-base stage installs into the base, and that
stage's apt step then installs nothing: no index download, no package. The same stage on the
plain Debian base runs apt once: the builder starts from os-base and has no apt step of its own.

Real: debootstrap from the Debian mirror, the cell's rendered os-base stage built with
BuildKit on each base (only the FROM line differs), the packages read from the image."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devkit.realengine import docker, imagekit, make_project

from .conftest import cell_of

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

REPOSITORY = "imagekit-baked"
BAKED = "imagekit-test-baked:bookworm"
PLAIN = "debian:bookworm-slim"
PACKAGES = ("ca-certificates", "g++", "libpython3.11-dev", "python3", "python3-venv")


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The test project, rendered and staged, and the baked base beside the plain one."""
    root = make_project(tmp_path_factory.mktemp("baked") / "p", repository=REPOSITORY)
    outs = []
    for args in (
        ["base", "bootstrap", "--bake-packages", "--tag", BAKED, "--envs", "envs"],
        ["render", "--envs", "envs"],
        ["stage", "--envs", "envs"],
    ):
        result = imagekit(*args, cwd=root, timeout=600)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        outs.append(result.stdout)
    assert f"{BAKED}: baking in {' '.join(PACKAGES)}" in outs[0]
    yield root
    docker("rmi", "-f", BAKED, *(f"{REPOSITORY}-os-base:{n}" for n in ("baked", "plain")),
           check=False)  # fmt: skip


def os_base(root: Path, base: str, name: str) -> str:
    """The cell's os-base stage built, uncached, FROM `base`: BuildKit's log."""
    cell = cell_of(REPOSITORY)
    text = (root / "dockerfiles" / cell / "Dockerfile").read_text()
    assert f"FROM {PLAIN} AS os-base\n" in text
    dockerfile = root / f"os-base-{name}.Dockerfile"
    dockerfile.write_text(text.replace(f"FROM {PLAIN} AS os-base\n", f"FROM {base} AS os-base\n"))
    context = root / ".imagekit" / "context" / cell
    result = docker("build", "--no-cache", "--progress", "plain", "--target", "os-base",
                    "-f", str(dockerfile), "-t", f"{REPOSITORY}-os-base:{name}", str(context),
                    timeout=600, check=False)  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout + result.stderr


def installed(image: str) -> set[str]:
    shown = docker("run", "--rm", "--entrypoint", "dpkg-query", image, "-W",
                   "-f", "${Package} ${db:Status-Abbrev}\n", *PACKAGES).stdout  # fmt: skip
    return {line.split()[0] for line in shown.splitlines() if line.split()[1:] == ["ii"]}


def test_the_baked_base_holds_the_packages_and_its_apt_step_installs_nothing(
    staged: Path,
) -> None:
    log = os_base(staged, BAKED, "baked")
    assert "Reading package lists" not in log and "Setting up" not in log
    assert installed(BAKED) == set(PACKAGES)
    assert installed(f"{REPOSITORY}-os-base:baked") == set(PACKAGES)


def test_on_the_plain_base_the_cell_runs_apt_once_and_gets_the_same_packages(
    staged: Path,
) -> None:
    cell = cell_of(REPOSITORY)
    dockerfile = (staged / "dockerfiles" / cell / "Dockerfile").read_text()
    assert dockerfile.count("apt-get update") == 1 and "FROM os-base AS builder" in dockerfile
    log = os_base(staged, PLAIN, "plain")
    assert log.count("Reading package lists") >= 1 and "Setting up g++" in log
    assert installed(f"{REPOSITORY}-os-base:plain") == set(PACKAGES)
