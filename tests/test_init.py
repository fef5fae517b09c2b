"""`imagekit init`, and no silent built-in catalog: a folder without a matrix is exit 2
naming init; the built-in catalog only by name (`--envs builtin:training`)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from imagekit import __version__
from imagekit.cli import main
from imagekit.cli.init_cmd import sanitized
from imagekit.locks import images
from imagekit.locks.pinned import load_cells
from imagekit.matrix.source import Matcher, ignore_patterns
from imagekit.resources import builtin_catalogs, default_envs_dir

from .conftest import ROOT
from .test_ci import actionlint_command

WRITTEN = ("envs/team.yaml", ".github/workflows/images.yml", ".dockerignore")


def run(*args: str) -> int:
    try:
        main(list(args))
    except SystemExit as exc:
        return int(exc.code or 0)
    raise AssertionError("main() must always exit")


@pytest.fixture
def team(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty folder named team, the working directory's child."""
    monkeypatch.chdir(tmp_path)
    return tmp_path / "team"


def files_in(folder: Path) -> set[str]:
    return {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}


def test_init_writes_a_matrix_that_lists_renders_and_names_the_next_steps(
    team: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("init", "team") == 0
    assert files_in(team) == set(WRITTEN)
    out = capsys.readouterr().out
    tag = "127.0.0.1:5000/team:2.7.1-cu126-py3.11-debian12-slim"
    for step in ("cd team", "imagekit render", "imagekit build", f"imagekit test {tag}"):
        assert step in out
    assert "imagekit build --push" in out and "set IMAGEKIT_INSTALL" in out
    (cell,) = load_cells([team / "envs"])
    assert (cell.cuda, cell.torch, cell.python, cell.os, cell.flavor) == (
        "12.6",
        "2.7.1",
        "3.11",
        "debian12",
        "slim",
    )
    assert cell.tags[0] == tag
    assert run("list", "--envs", "team/envs") == 0
    assert cell.id in capsys.readouterr().out
    monkeypatch.chdir(team)
    assert run("render") == 0
    assert (team / "dockerfiles" / cell.id / "Dockerfile").is_file()
    assert run("render", "--check") == 0


def test_init_here_takes_the_folder_name_made_a_repository_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    here = tmp_path / "My Team_Images!"
    here.mkdir()
    monkeypatch.chdir(here)
    assert run("init") == 0
    assert (here / "envs" / "my-team-images.yaml").is_file()
    assert "cd " not in capsys.readouterr().out  # already there
    (cell,) = load_cells([here / "envs"])
    assert cell.tags[0].startswith("127.0.0.1:5000/my-team-images:")
    assert sanitized("__") == "images"


def test_init_with_name_and_registry(team: Path) -> None:
    assert run("init", "team", "--name", "train", "--registry", "ghcr.io/acme") == 0
    text = (team / "envs" / "train.yaml").read_text()
    assert 'registry: "ghcr.io/acme"' in text and "127.0.0.1" not in text
    (cell,) = load_cells([team / "envs"])
    assert cell.tags[0].startswith("ghcr.io/acme/train:")


def test_init_never_overwrites_and_writes_nothing_when_one_file_is_there(
    team: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    team.mkdir()
    (team / ".dockerignore").write_text("mine\n")
    assert run("init", "team") == 2
    err = capsys.readouterr().err
    assert "team/.dockerignore" in err and "--force" in err
    assert files_in(team) == {".dockerignore"}  # nothing written, no temp file left
    assert (team / ".dockerignore").read_text() == "mine\n"


def test_init_again_names_every_file_and_force_overwrites(
    team: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("init", "team") == 0
    matrix = team / "envs" / "team.yaml"
    matrix.write_text("# edited\n")
    capsys.readouterr()
    assert run("init", "team") == 2
    err = capsys.readouterr().err
    for name in WRITTEN:
        assert f"team/{name}" in err
    assert matrix.read_text() == "# edited\n"
    assert run("init", "team", "--force") == 0
    assert "one cell to start" in matrix.read_text().lower()
    assert files_in(team) == set(WRITTEN)


def test_force_does_not_replace_a_folder(team: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (team / ".dockerignore").mkdir(parents=True)
    assert run("init", "team", "--force") == 2
    assert "not a file" in capsys.readouterr().err
    assert files_in(team) == set()


def test_a_matrix_that_does_not_load_leaves_nothing_written(
    team: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (team / "envs").mkdir(parents=True)
    (team / "envs" / "images.lock").write_text("not json")  # read with the new matrix
    assert run("init", "team") == 2
    assert "not a valid lock file" in capsys.readouterr().err
    assert files_in(team) == {"envs/images.lock"}
    assert not (team / ".github").exists()  # nor the folders it made


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--name", "My_Team"], "--name"),
        (["--name", "a/b"], "--name"),
        (["--registry", "https://ghcr.io"], "--registry"),
        (["--install", "git+https://user:token@git.example.com/imagekit"], "credentials"),
        (["--install", "${{ secrets.X }}"], "--install"),
        (["--install", "imagekit\nrm -rf /"], "--install"),
        (["--install", "--index-url=x"], "--install"),
    ],
)
def test_bad_options_exit_2_and_write_nothing(
    team: Path, args: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("init", "team", *args) == 2
    assert named in capsys.readouterr().err
    assert not team.exists()


def test_init_into_a_file_exits_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("file").write_text("x")
    assert run("init", "file") == 2


def test_other_matrix_files_are_named(team: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (team / "envs").mkdir(parents=True)
    (team / "envs" / "older.yml").write_text(
        "matrix:\n  - {cuda: '12.6', torch: '2.7.1', python: '3.12', os: debian12, flavor: slim}\n"
    )
    assert run("init", "team") == 0
    assert "older.yml is in the matrix too" in capsys.readouterr().out


def test_the_dockerignore_keeps_secrets_and_scratch_out_of_a_source_copy(team: Path) -> None:
    assert run("init", "team") == 0
    matcher = Matcher(ignore_patterns(team, default_ignore=False))
    for path in (".git/config", ".venv/bin/python", ".imagekit/x", "reports/a/build.json"):
        assert matcher.ignored(path), path
    for path in ("app/__pycache__/m.pyc", "keys/tls.pem", ".env", "app/.env.local"):
        assert matcher.ignored(path), path
    for path in ("app/main.py", "envs/team.yaml", "requirements.txt", "pyproject.toml"):
        assert not matcher.ignored(path), path


def test_the_commented_team_layer_uncommented_loads(team: Path) -> None:
    """Each commented-out field under defaults:, uncommented, is valid as written there
    (the team's layer: docs/your-layer.md)."""
    assert run("init", "team") == 0
    matrix = team / "envs" / "team.yaml"
    text = matrix.read_text()
    keys = re.findall(r"^  # ([a-z_]+): ", text, re.MULTILINE)
    assert {"requirements", "source", "source_package", "run", "workdir", "command"} <= set(keys)
    assert {"pip", "apt"} <= set(keys)
    matrix.write_text(re.sub(r"^  # ([a-z_]+): ", r"  \1: ", text, flags=re.MULTILINE))
    (team / "requirements.txt").write_text("tqdm>=4.66\n")
    (team / "pyproject.toml").write_text('[project]\nname = "app"\nversion = "1"\n')
    (cell,) = load_cells([team / "envs"])
    assert cell.pip and cell.apt == ("git",)


# -- the workflow ---------------------------------------------------------------------------


def workflow_of(folder: Path) -> dict:  # type: ignore[type-arg]
    text = (folder / ".github" / "workflows" / "images.yml").read_text()
    return yaml.load(text, Loader=yaml.BaseLoader)


def steps_running(job: dict, word: str) -> list[str]:  # type: ignore[type-arg]
    return [s["run"] for s in job["steps"] if word in s.get("run", "")]


def test_the_workflow_installs_imagekit_not_the_repository(team: Path) -> None:
    assert run("init", "team") == 0
    text = (team / ".github" / "workflows" / "images.yml").read_text()
    assert "pip install ." not in text
    flow = workflow_of(team)
    assert flow["env"]["IMAGEKIT_INSTALL"] == f"imagekit=={__version__}"
    for name, job in flow["jobs"].items():
        runs_imagekit = steps_running(job, "imagekit ")
        installs = steps_running(job, "pip install")
        if runs_imagekit:  # every job that runs imagekit installs it first, from the spec
            assert installs == ['pip install "$IMAGEKIT_INSTALL"'], name
        else:
            assert installs == [], name
    assert "paths" not in flow["on"]["push"]  # imagekit/**, templates/** are not the team's


def test_the_workflow_is_imagekits_own_but_for_install_login_and_paths(team: Path) -> None:
    spec = "git+https://git.example.com/acme/imagekit@v0.1.0"
    assert run("init", "team", "--registry", "registry.acme.io:5000/ml", "--install", spec) == 0
    ours = workflow_of(team)
    theirs = yaml.load(
        (ROOT / ".github" / "workflows" / "images.yml").read_text(), Loader=yaml.BaseLoader
    )
    assert ours["env"].pop("IMAGEKIT_INSTALL") == spec
    assert ours["env"] == theirs["env"]
    assert list(ours["jobs"]) == list(theirs["jobs"])
    logins = 0
    for name, job in ours["jobs"].items():
        for mine, original in zip(job["steps"], theirs["jobs"][name]["steps"], strict=True):
            if original.get("run") == "pip install .":
                assert mine == {"run": 'pip install "$IMAGEKIT_INSTALL"'}
            elif original.get("uses", "").startswith("docker/login-action"):
                logins += 1
                assert mine["with"] == {
                    "registry": "registry.acme.io:5000",
                    "username": "${{ secrets.REGISTRY_USERNAME }}",
                    "password": "${{ secrets.REGISTRY_PASSWORD }}",
                }
            else:
                assert mine == original, name
        assert {k: v for k, v in job.items() if k != "steps"} == {
            k: v for k, v in theirs["jobs"][name].items() if k != "steps"
        }
    assert logins == 3


def test_on_ghcr_the_workflow_logs_in_with_the_jobs_token(team: Path) -> None:
    assert run("init", "team", "--registry", "ghcr.io/acme") == 0
    text = (team / ".github" / "workflows" / "images.yml").read_text()
    assert text.count("password: ${{ secrets.GITHUB_TOKEN }}") == 3
    assert "REGISTRY_PASSWORD" not in text


@pytest.mark.subprocess
def test_actionlint_passes_on_the_written_workflows(team: Path) -> None:
    assert run("init", "team") == 0
    assert run("init", "ghcr", "--registry", "ghcr.io/acme") == 0
    assert run("init", "ipv6", "--registry", "[::1]:5000", "--install", "imagekit @ file:///w") == 0
    flows = [str(Path(d, ".github", "workflows", "images.yml")) for d in ("team", "ghcr", "ipv6")]
    result = subprocess.run(
        [*actionlint_command(), *flows],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr


# -- no matrix, no silent catalog -----------------------------------------------------------


@pytest.mark.parametrize("command", [["list"], ["render"], ["matrix"], ["render", "--check"]])
def test_a_folder_without_envs_is_exit_2_naming_init(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: list[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    assert run(*command) == 2
    err = capsys.readouterr().err
    assert f"no matrix here: {tmp_path} has no envs/ folder" in err
    assert "imagekit init" in err and "--envs builtin:training" in err
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_build_without_envs_is_exit_2_before_any_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert run("build") == 2
    assert "imagekit init" in capsys.readouterr().err


def test_an_envs_folder_without_matrix_files_is_exit_2_naming_init(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / "notes.txt").write_text("x")
    assert run("list") == 2
    assert "no matrix in envs: the folder has no matrix file" in capsys.readouterr().err
    (tmp_path / "other").mkdir()
    assert run("list", "--envs", "other") == 2
    err = capsys.readouterr().err
    assert "no matrix in other" in err and "imagekit init" in err
    assert run("list", "--envs", "proj/envs") == 2
    assert "no matrix at proj/envs: no such file or folder" in (err := capsys.readouterr().err)
    assert "imagekit init proj" in err


def test_the_builtin_catalog_by_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert set(builtin_catalogs()) == {"training"}
    assert run("list", "--envs", "builtin:training", "--cuda", "12.6", "--os", "debian12") == 0
    assert "1 cell" in capsys.readouterr().out
    assert len(load_cells([Path("builtin:training")])) == len(load_cells([ROOT / "envs"]))
    # its lock is the catalog's own, as with --envs naming the file
    assert images.default_path([Path("builtin:training")]) == default_envs_dir() / "images.lock"
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_builtin_name_lists_the_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert run("list", "--envs", "builtin:inference") == 2
    err = capsys.readouterr().err
    assert "no matrix 'inference'" in err and "builtin:training" in err
