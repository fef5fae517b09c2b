"""A team adopts imagekit as a new user would (issue 50): in a folder outside this clone,
imagekit's wheel installed into a fresh virtual environment, `imagekit init`, the matrix
edited to carry the team's own layer (a pip package, a requirements file, a `run:` step, the
team's code installed as a package, a working directory and a command), a build on the default
engine and `imagekit test`; then the image's own files and behaviour: the team's code imports,
torch is the cell's, the command runs behind imagekit's entrypoint, the SBOM names the team's
packages, and `render` deletes nothing it does not own. A package that needs another torch is
refused at build, naming the package, what it asked for and what the cell holds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from devkit.realengine import (
    EPOCH,
    REGISTRY,
    docker,
    made,
    marked_ca_bundle,
    require_engine,
    wheelhouse,
)

from ..conftest import ROOT

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1500)]

TEAM = "teamrepo"  # the folder's name: init names the matrix file and the image after it
UV = str(Path(sys.executable).parent / "uv")


def run(*args: str | Path, cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SOURCE_DATE_EPOCH": EPOCH, "PYTHONUNBUFFERED": "1"}
    # A new shell: not this suite's venv, and none of the engine's variables that
    # `.ci/engines.sh env` prints; imagekit finds the engine the setup recorded.
    for name in (
        "VIRTUAL_ENV",
        "IMAGEKIT_DOCKER",
        "IMAGEKIT_ENGINE",
        "DOCKER_CONFIG",
        "DOCKER_HOST",
    ):
        env.pop(name, None)
    return subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result.stdout


def installed_imagekit(tmp: Path) -> Path:
    """imagekit's wheel, built from this clone, in a virtual environment of its own."""
    dist = tmp / "dist"
    ok(run(UV, "build", "--wheel", "--out-dir", dist, ROOT, cwd=tmp))
    (wheel,) = dist.glob("imagekit-*.whl")
    venv = tmp / "venv"
    ok(run(UV, "venv", "--python", sys.executable, venv, cwd=tmp))
    ok(run(UV, "pip", "install", "--python", venv / "bin" / "python", wheel, cwd=tmp))
    return venv / "bin" / "imagekit"


def write_team_code(repo: Path, torch_pin: str = "") -> None:
    """The team's package (src layout) with a module run as the image's command."""
    deps = f'"{torch_pin}"' if torch_pin else ""
    (repo / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "teamcode"\nversion = "0.1.0"\ndependencies = [{deps}]\n'
        '[tool.setuptools.packages.find]\nwhere = ["src"]\n'
    )
    package = repo / "src" / "teamcode"
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text('GREETING = "hello from the team"\n')
    (package / "__main__.py").write_text(
        "import os, teamcode, torch\n"
        "print(teamcode.GREETING, torch.__version__, os.getcwd(),\n"
        "      os.environ.get('OMP_NUM_THREADS'), os.environ.get('IMAGEKIT_OMP_AUTO'))\n"
    )
    (repo / "requirements.txt").write_text("# the team's own pins\nsix==1.16.0\n")


def edit_matrix(matrix: Path) -> None:
    """What the team changes in init's file: the local registry, a CPU cell whose torch
    comes from the wheelhouse (so the test needs no CUDA download), and its own layer."""
    spec = yaml.safe_load(matrix.read_text())
    spec["registry"] = REGISTRY
    spec["matrix"] = [
        {"cuda": "cpu", "torch": "2.13.0", "python": "3.11", "os": "debian12", "flavor": "slim"}
    ]
    defaults = spec.setdefault("defaults", {}) or {}
    spec["defaults"] = defaults
    defaults.update(
        {
            "pip": ["tomli==2.0.1"],
            "requirements": ["../requirements.txt"],
            "source": "..",
            "source_package": True,
            "run": ["python -c 'import six, tomli' && touch /tmp/team-run-step-ran"],
            "workdir": "/workspace",
            "command": ["python", "-m", "teamcode"],
            "compile": False,
        }
    )
    matrix.write_text(yaml.safe_dump(spec, sort_keys=False))


def build(ik: Path, repo: Path, *more: str) -> subprocess.CompletedProcess[str]:
    return run(
        ik,
        "build",
        "--wheelhouse",
        wheelhouse(),
        "--torch-index",
        "none",
        "--ca-bundle",
        marked_ca_bundle(repo.parent),
        "--progress",
        "plain",
        *more,
        cwd=repo,
        timeout=1200,
    )


@pytest.fixture(scope="module")
def team(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict]:  # type: ignore[type-arg]
    """The team's repository after init, its edits and a build: (imagekit, repo, build.json)."""
    require_engine()
    made(TEAM)  # its images removed after this file (tests/real/conftest.py)
    tmp = tmp_path_factory.mktemp("newuser")
    ik = installed_imagekit(tmp)
    repo = tmp / TEAM
    repo.mkdir()
    ok(run("git", "init", "-q", cwd=repo))
    said = ok(run(ik, "init", cwd=repo))
    assert "imagekit render" in said and "imagekit build" in said, said
    matrix = repo / "envs" / f"{TEAM}.yaml"
    assert matrix.is_file() and (repo / ".dockerignore").is_file()
    workflow = (repo / ".github" / "workflows" / "images.yml").read_text()
    assert "pip install ." not in workflow  # the workflow installs imagekit, not the team's repo
    edit_matrix(matrix)
    write_team_code(repo)
    ok(run(ik, "render", cwd=repo))
    result = build(ik, repo)
    ok(result)
    (report,) = (repo / "reports").glob("*/build.json")
    return ik, repo, json.loads(report.read_text())


def image_of(team: tuple[Path, Path, dict]) -> str:  # type: ignore[type-arg]
    report = team[2]
    assert report["status"] == "built", report
    return str(report["tags"][0])


def in_image(image: str, *command: str) -> str:
    result = docker("run", "--rm", image, *command, check=False, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout.strip()


def test_the_teams_code_runs_as_the_images_command(team: tuple[Path, Path, dict]) -> None:  # type: ignore[type-arg]
    image = image_of(team)
    greeting, torch, cwd, threads, auto = in_image(image).split()[-5:]
    assert (greeting, torch, cwd) == ("team", "2.13.0+cpu", "/workspace")
    # the entrypoint ran first: it computed the threads from the container's CPUs
    assert auto == "1" and int(threads) >= 1


def test_the_teams_layer_is_in_the_image(team: tuple[Path, Path, dict]) -> None:  # type: ignore[type-arg]
    image = image_of(team)
    probe = (
        "import importlib.metadata as m, six, tomli, teamcode, torch;"
        "print(m.version('six'), m.version('tomli'), m.version('teamcode'), torch.__version__,"
        " teamcode.__file__)"
    )
    six, tomli, teamcode, torch, where = in_image(image, "python", "-c", probe).split()
    assert (six, tomli, teamcode, torch) == ("1.16.0", "2.0.1", "0.1.0", "2.13.0+cpu")
    assert "site-packages" in where  # installed as a package, not only copied
    in_image(image, "test", "-f", "/tmp/team-run-step-ran")


def test_the_sbom_names_the_teams_packages(team: tuple[Path, Path, dict]) -> None:  # type: ignore[type-arg]
    ik, repo, _ = team
    sbom = ok(run(ik, "sbom", image_of(team), "--from", "image", cwd=repo))
    names = {c["name"] for c in json.loads(sbom)["components"]}
    assert {"six", "tomli", "teamcode", "torch"} <= names


def test_the_self_check_passes(team: tuple[Path, Path, dict]) -> None:  # type: ignore[type-arg]
    ik, repo, _ = team
    out = repo / "reports" / "selfcheck.json"
    result = run(ik, "test", image_of(team), "--checks", "stack", "--json", out, cwd=repo)
    ok(result)
    checks = {c["name"]: c["status"] for c in json.loads(out.read_text())["checks"]}
    assert checks == {"stack": "passed"}


def test_render_deletes_nothing_it_does_not_own(team: tuple[Path, Path, dict]) -> None:  # type: ignore[type-arg]
    ik, repo, _ = team
    # another image of the same stack beside the team's, and a hand-written Dockerfile
    other = repo / "envs" / "inference.yaml"
    text = (repo / "envs" / f"{TEAM}.yaml").read_text()
    other.write_text(text.replace(f"repository: {TEAM}", "repository: inference"))
    ok(run(ik, "render", "--envs", other, cwd=repo))
    handmade = repo / "dockerfiles" / "handmade" / "Dockerfile"
    handmade.parent.mkdir(parents=True)
    handmade.write_text("FROM scratch\n")
    before = {p: p.read_bytes() for p in (repo / "dockerfiles").rglob("Dockerfile")}
    assert len(before) == 3
    ok(run(ik, "render", "--envs", repo / "envs" / f"{TEAM}.yaml", cwd=repo))
    after = {p: p.read_bytes() for p in (repo / "dockerfiles").rglob("Dockerfile")}
    assert after == before
    # and a file a person edited is never overwritten
    mine = next(p for p in before if TEAM in str(p))
    mine.write_bytes(before[mine] + b"# edited by hand\n")
    refused = run(ik, "render", cwd=repo)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert mine.read_bytes().endswith(b"# edited by hand\n")


def test_a_package_needing_another_torch_is_refused(team: tuple[Path, Path, dict]) -> None:  # type: ignore[type-arg]
    ik, repo, _ = team
    conflict = repo.parent / "conflict"
    ignore = shutil.ignore_patterns("reports", "dockerfiles", "inference.yaml")
    shutil.copytree(repo, conflict, ignore=ignore)
    write_team_code(conflict, torch_pin="torch==2.8.0")
    ok(run(ik, "render", cwd=conflict))
    result = build(ik, conflict)
    said = result.stdout + result.stderr
    assert result.returncode != 0, said[-3000:]
    refusal = "imagekit: teamcode 0.1.0 asks for torch==2.8.0; this cell holds torch 2.13.0+cpu"
    assert refusal in said, said[-3000:]
    (report,) = (conflict / "reports").glob("*/build.json")
    assert json.loads(report.read_text())["status"] != "built"
