"""The team's own layer (docs/your-layer.md): `requirements:`, `source_package`, `run:`,
`workdir`, `command`: validation, the cascade, the Dockerfile (BuildKit's parser), the
build's stack constraints (team_install.py with real pip and uv over fake wheels), the
package lock's team group and the SBOM."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import subprocess
import venv
from dataclasses import replace
from pathlib import Path

import dockerfile
import pytest

from imagekit.builder import context
from imagekit.buildtime import sbom_writer, team_install
from imagekit.errors import SpecError, UsageError
from imagekit.locks import packages, resolving
from imagekit.locks.package_file import Pin
from imagekit.locks.pinned import load_cells
from imagekit.matrix.cells import Cell
from imagekit.render.dockerfile import render

from .test_packagelock import fake_wheel

CPU_CELL = """\
registry: 127.0.0.1:5000
repository: team
defaults:
  installer: {installer}
matrix:
  - cuda: cpu
    torch: "2.13.0"
    python: "3.11"
    os: debian12
    flavor: slim
"""
PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "teamapp"
version = "0.1.0"
dependencies = ["tqdm>=4.66"]
"""


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / "envs").mkdir()
    (root / "app" / "teamapp").mkdir(parents=True)
    (root / "app" / "teamapp" / "__init__.py").write_text("X = 1\n")
    (root / "app" / "pyproject.toml").write_text(PYPROJECT)
    (root / "requirements.txt").write_text("# the team's\nnumpy<3  # below 3\n-r extra.txt\n")
    (root / "extra.txt").write_text("packaging>=24\n")
    return root


def cells(repo: Path, block: str = "", rest: str = "", installer: str = "pip") -> list[Cell]:
    text = CPU_CELL.format(installer=installer) + block + rest
    (repo / "envs" / "m.yaml").write_text(text)
    return load_cells([repo / "envs"])


def problems(repo: Path, block: str = "", rest: str = "") -> str:
    with pytest.raises(SpecError) as raised:
        cells(repo, block, rest)
    return "\n".join(raised.value.problems)


# --- validation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("block", "words"),
    [
        ('    run: ["echo a\\necho b"]\n', ["run[0]", "a newline at position 6", "&&"]),
        ('    run: ["echo \\u0000"]\n', ["run[0]", "a NUL"]),
        ('    run: ["  "]\n', ["run[0]", "an empty step"]),
        ("    workdir: app\n", ["workdir", "'app'", "an absolute path"]),
        ("    workdir: /a/../etc\n", ["workdir", "without . or .."]),
        ('    workdir: "/a b"\n', ["workdir", "an absolute path"]),
        ("    command: python -m app\n", ["command", '["python", "-m", "app"]', "exec form"]),
        ("    command: []\n", ["command", "name the program"]),
        ('    command: ["python", "a\\nb"]\n', ["command[1]", "a newline"]),
        ('    source_package: "true"\n', ["source_package", "valid boolean"]),
    ],
)
def test_bad_values_name_the_field_the_value_and_the_fix(
    repo: Path, block: str, words: list[str]
) -> None:
    found = problems(repo, block)
    for word in words:
        assert word in found, found


@pytest.mark.parametrize(
    ("file_text", "words"),
    [
        ("-e .\n", ["requirements.txt:1", "'-e .'", "source_package: true"]),
        ("--index-url https://x/simple\n", ["requirements.txt:1", "imagekit build --index-url"]),
        ("--extra-index-url=https://x\n", ["requirements.txt:1", "BuildKit secret"]),
        ("-c pins.txt\n", ["constrains the team's packages to the cell's stack"]),
        ("numpy\n--find-links /w\n", ["requirements.txt:2", "--wheelhouse"]),
        ("numpy==2.0 --hash=sha256:" + "a" * 64 + "\n", ["lock --packages"]),
        ("--pre\n", ["an installer option", "requirements and -r lines only"]),
        ("numpy>>2\n", ["requirements.txt:1", "not a PEP 508 requirement"]),
        ("pkg @ https://user:secret@host/p.whl\n", ["credentials"]),
        ("pkg @ file:///home/me/pkg\n", ["a file: URL is a path on this machine"]),
        ("-r requirements.txt\n", ["includes itself"]),
        ("-r ../../outside.txt\n", ["outside the repository"]),
    ],
)
def test_a_requirements_file_is_checked_line_by_line(
    repo: Path, file_text: str, words: list[str]
) -> None:
    (repo / "requirements.txt").write_text(file_text)
    found = problems(repo, "    requirements: [../requirements.txt]\n")
    assert "requirements:" in found  # the field
    for word in words:
        assert word in found, found
    assert "secret" not in found.replace("BuildKit secret", "")  # credentials masked


def test_a_requirements_entry_must_be_a_file_inside_the_repository(
    repo: Path, tmp_path: Path
) -> None:
    (tmp_path / "outside.txt").write_text("numpy\n")
    assert "outside the repository" in problems(repo, "    requirements: ../../outside.txt\n")
    assert "does not exist" in problems(repo, "    requirements: ../missing.txt\n")
    assert "is not a file" in problems(repo, "    requirements: ../app\n")
    os.symlink(tmp_path / "outside.txt", repo / "link.txt")
    assert "outside the repository" in problems(repo, "    requirements: ../link.txt\n")


def test_a_pyproject_gives_its_dependencies_and_refuses_dynamic_ones(repo: Path) -> None:
    (cell,) = cells(repo, "    requirements: ../app/pyproject.toml\n")
    assert cell.requirements == ("tqdm>=4.66",)
    assert cell.requirement_files == ("app/pyproject.toml",)
    (repo / "app" / "pyproject.toml").write_text(
        '[project]\nname = "x"\ndynamic = ["dependencies"]\n'
    )
    assert "dependencies is dynamic" in problems(repo, "    requirements: ../app/pyproject.toml\n")
    (repo / "app" / "pyproject.toml").write_text("[tool.x]\n")
    assert "no [project] table" in problems(repo, "    requirements: ../app/pyproject.toml\n")


def test_source_package_needs_a_source_that_is_a_package(repo: Path) -> None:
    found = problems(repo, "    source_package: true\n")
    assert "source_package: " in found and "has no `source:`" in found
    (repo / "app" / "pyproject.toml").unlink()
    found = problems(repo, "    source: ../app\n    source_package: true\n")
    assert "no pyproject.toml or setup.py" in found and "source_package" in found
    (repo / "app" / "setup.py").write_text("from setuptools import setup\nsetup()\n")
    (cell,) = cells(repo, "    source: ../app\n    source_package: true\n")
    assert cell.source_package and cell.source_dependencies is None  # not static
    assert packages.lockable(cell) and not packages.team_locked(cell)  # the stack still is


# --- the cascade -------------------------------------------------------------------------


def test_the_fields_cascade_defaults_block_overrides(repo: Path) -> None:
    defaults = (
        "  requirements: ../requirements.txt\n  run: [echo defaults]\n  workdir: /srv\n"
        "  command: [python, -m, app]\n"
    )
    (repo / "envs" / "m.yaml").write_text(
        CPU_CELL.format(installer="pip").replace(
            "  installer: pip\n", "  installer: pip\n" + defaults
        )
        + '    run: ["echo block"]\n    inherit: {run: append}\n'
        + "overrides:\n  - match: {cuda: cpu}\n    command: [bash]\n"
    )
    (cell,) = load_cells([repo / "envs"])
    assert cell.requirements == ("numpy<3", "packaging>=24")  # from defaults, -r followed
    assert cell.requirement_files == ("requirements.txt",)
    assert cell.run == ("echo defaults", "echo block")  # the block appends
    assert cell.workdir == "/srv"
    assert cell.command == ("bash",)  # the override wins
    assert cell.command_json == '["bash"]'


# --- rendering ---------------------------------------------------------------------------


def parsed(text: str, tmp_path: Path) -> list[dockerfile.Command]:
    path = tmp_path / "Dockerfile"
    path.write_text(text)
    return list(dockerfile.parse_file(str(path)))


ALL_FIELDS = """\
    source: ../app
    source_package: true
    requirements: [../requirements.txt]
    pip: ["tqdm>=4.66"]
    run: ["python -c 'import teamapp' && echo ok > /tmp/ok", "apt-get update"]
    workdir: /srv/app
    command: ["python", "-m", "teamapp", "--say", "it's \\"quoted\\""]
"""


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_the_dockerfile_holds_the_team_layer(repo: Path, tmp_path: Path, installer: str) -> None:
    (cell,) = cells(repo, ALL_FIELDS, installer=installer)
    commands = parsed(render(cell), tmp_path)
    runs = [c for c in commands if c.cmd == "RUN"]
    (team,) = [c for c in runs if "team_install.py" in c.value[0]]
    line = " ".join(team.value[0].split())
    # the stack constrains them: team_install.py runs the installer, the requirements after --
    assert "/run/imagekit/team_install.py --locked /run/imagekit/locked --source " in line
    assert line.index("-- 'tqdm>=4.66' 'numpy<3' 'packaging>=24'") > line.index(" install ")
    assert "--mount=type=bind,source=source,target=/run/imagekit/source,rw" in team.flags
    steps = [c for c in runs if "/bin/sh -c" in c.value[0]]
    assert len(steps) == 2
    for step in steps:
        cache = f"--mount=type=cache,id=imagekit-{installer},target=/root/.cache/{installer}"
        assert any(f.startswith(cache) for f in step.flags)
        assert any("imagekit-apt-cache-debian12" in f for f in step.flags)
    assert "import teamapp" in steps[0].value[0]
    # after the packages, before the SBOM (so it lists what they install)
    order = [c.value[0] for c in runs]
    sbom = next(i for i, v in enumerate(order) if "sbom_writer.py" in v)
    assert order.index(team.value[0]) < order.index(steps[0].value[0]) < sbom
    last = {c.cmd: c for c in commands}
    assert last["WORKDIR"].value == ("/srv/app",)
    assert last["ENTRYPOINT"].value == ("/usr/local/bin/imagekit-entrypoint",)
    assert last["CMD"].value == ("python", "-m", "teamapp", "--say", 'it\'s "quoted"')
    assert last["CMD"].json


def test_a_changed_requirements_file_changes_the_dockerfile(repo: Path) -> None:
    (before,) = cells(repo, "    requirements: ../requirements.txt\n")
    (repo / "extra.txt").write_text("packaging>=25\n")
    (after,) = cells(repo, "    requirements: ../requirements.txt\n")
    assert render(before) != render(after)
    assert "'packaging>=25'" in render(after)


def test_a_cell_without_the_team_layer_renders_no_step_of_it(repo: Path) -> None:
    (cell,) = cells(repo)
    text = render(cell)
    assert "team_install.py" not in text and "/bin/sh -c" not in text
    assert "WORKDIR /workspace\n" in text and '\nCMD ["python"]\n' in text


def test_the_context_carries_team_install(repo: Path, tmp_path: Path) -> None:
    (cell,) = cells(repo, "    source: ../app\n    source_package: true\n")
    staged = context.stage(cell, tmp_path / "ctx")
    script = context.script_text("team_install.py").encode("utf-8")
    assert (staged / "imagekit" / "team_install.py").read_bytes() == script
    assert (staged / "source" / "pyproject.toml").is_file()


# --- the build's constraints: team_install.py with real installers --------------------------


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("wheels")
    fake_wheel(folder, "torch", "2.13.0+cpu")
    fake_wheel(folder, "torch", "2.8.0")
    fake_wheel(folder, "nvidia-cublas-cu12", "12.6.4.1")
    fake_wheel(folder, "nvidia-cublas-cu12", "12.8.4.1")
    fake_wheel(folder, "teamlib", "1.0", ["torch==2.8.0"])
    fake_wheel(folder, "cudalib", "1.0", ["nvidia-cublas-cu12>=12.8"])
    fake_wheel(folder, "okpkg", "1.0", ["torch>=2.0", "numpyish"])
    fake_wheel(folder, "numpyish", "2.0")
    return folder


def clean_env() -> dict[str, str]:
    """No installer settings, and no imagekit on PYTHONPATH: the scripts run as in the build."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "PYTHONPATH"))}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}


def stack_venv(where: Path, wheels: Path) -> Path:
    """A venv holding the stack: torch 2.13.0+cpu and a CUDA library, as a cell's does."""
    venv.create(where, with_pip=True)
    python = where / "bin" / "python"
    subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-index", "--find-links", wheels,
         "torch==2.13.0+cpu", "nvidia-cublas-cu12==12.6.4.1"],
        check=True, env=clean_env(),
    )  # fmt: skip
    return python


def team_install_run(
    python: Path, installer: str, wheels: Path, *requirements: str, options: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    if installer == "pip":
        command = [str(python), "-m", "pip", "install"]
    else:
        command = [resolving.uv_binary(), "pip", "install", "--python", str(python)]
    command += ["--no-index", "--find-links", str(wheels)]
    script = python.parents[2] / "team_install.py"  # as the build context carries it
    script.write_text(context.script_text("team_install.py"))
    return subprocess.run(
        [str(python), "-B", script, *options, *command, "--", *requirements],
        capture_output=True, text=True, env=clean_env(), check=False,
    )  # fmt: skip


def installed(python: Path) -> dict[str, str]:
    out = subprocess.run(
        [python, "-m", "pip", "list", "--format", "json"],
        capture_output=True, text=True, check=True, env=clean_env(),
    ).stdout  # fmt: skip
    return {p["name"]: p["version"] for p in json.loads(out)}


@pytest.mark.subprocess
@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_a_package_that_needs_another_torch_fails_naming_both_versions(
    tmp_path: Path, wheels: Path, installer: str
) -> None:
    python = stack_venv(tmp_path / "venv", wheels)
    result = team_install_run(python, installer, wheels, "teamlib")
    assert result.returncode != 0
    assert (
        "imagekit: teamlib asks for torch==2.8.0; this cell holds torch 2.13.0+cpu"
        in result.stderr.replace("teamlib 1.0 asks", "teamlib asks")
    ), result.stdout + result.stderr
    assert "never replaces it" in result.stderr
    result = team_install_run(python, installer, wheels, "cudalib")
    assert result.returncode != 0
    assert "asks for nvidia-cublas-cu12>=12.8; this cell holds nvidia-cublas-cu12 12.6.4.1" in (
        result.stderr
    ), result.stdout + result.stderr
    result = team_install_run(python, installer, wheels, "torch==2.8.0")
    assert "your requirement asks for torch==2.8.0" in result.stderr
    assert installed(python)["torch"] == "2.13.0+cpu"  # never a silent swap
    ok = team_install_run(python, installer, wheels, "okpkg")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    after = installed(python)
    assert after["okpkg"] == "1.0" and after["torch"] == "2.13.0+cpu"


def test_the_constraints_pin_the_stack_the_venv_holds_and_nothing_else() -> None:
    assert team_install.is_stack("Torch") and team_install.is_stack("nvidia_cudnn_cu12")
    assert team_install.is_stack("cuda-toolkit") and team_install.is_stack("triton")
    assert not team_install.is_stack("nvidia-ml-py") and not team_install.is_stack("numpy")
    held = {"nvidia-nccl-cu12": "2.27.5", "torch": "2.13.0+cpu"}
    assert team_install.constraints_text(held) == "nvidia-nccl-cu12==2.27.5\ntorch==2.13.0+cpu\n"


def test_a_python_the_package_does_not_accept_is_named() -> None:
    pip = "ERROR: Package 'newpy' requires a different Python: 3.11.2 not in '>=3.12'"
    uv = "Because newpy==1.0 requires Python >=3.12 and only newpy==1.0 is available"
    for output in (pip, uv):
        lines = team_install.diagnose(output, {"torch": "2.13.0"}, "3.11.2")
        assert lines and "asks for Python>=3.12; this cell holds Python 3.11.2" in lines[0]


def test_a_failure_that_is_no_conflict_is_not_called_one() -> None:
    line = team_install.summary({"torch": "2.13.0"}, "3.11.2", "error: Failed to build `x`")
    assert "failed (the installer's output is above)" in line and "never replaces" not in line


# --- the package lock --------------------------------------------------------------------

TORCH = {"torch==2.13.0+cpu": "a", "numpy==2.3.4": "b", "nvidia-nccl-cu12==2.27.5": "c"}
TEAM = {"torch==2.13.0+cpu": "a", "numpy==2.4.0": "d", "tqdm==4.67.1": "e", "teamdep==1.0": "f"}


def team_resolver(calls: list[tuple[list[str], list[str]]]):  # type: ignore[no-untyped-def]
    def resolve(requirements, constraints, index, wheelhouse, python, platform):  # type: ignore[no-untyped-def]
        calls.append((list(requirements), list(constraints)))
        pins = TEAM if any("torch" in c for c in constraints) else TORCH
        return [Pin(r, (h * 64,)) for r, h in pins.items()]

    return resolve


def test_lock_packages_locks_the_team_group_against_the_stack(repo: Path, tmp_path: Path) -> None:
    (cell,) = cells(
        repo, '    pip: ["numpy>=2.4"]\n    requirements: ../requirements.txt\n'
        "    source: ../app\n    source_package: true\n",
    )  # fmt: skip
    calls: list[tuple[list[str], list[str]]] = []
    lock = resolving.resolve(cell, team_resolver(calls), "", None)
    team_call = calls[-1]
    # pip, then the files' lines, then the source package's dependencies
    assert team_call[0] == ["numpy>=2.4", "numpy<3", "packaging>=24", "tqdm>=4.66"]
    assert sorted(team_call[1]) == ["nvidia-nccl-cu12==2.27.5", "torch==2.13.0+cpu"]  # the stack
    team = [p.requirement for p in lock.groups["team"]]
    assert team == ["numpy==2.4.0", "teamdep==1.0", "tqdm==4.67.1"]  # torch: already below
    assert lock.inputs["team"] == ["numpy>=2.4", "numpy<3", "packaging>=24"]
    assert lock.inputs["source-package"] == ["tqdm>=4.66"]
    text = packages.render_text(lock)
    assert "# [team]\nnumpy==2.4.0 \\\n    --hash=sha256:" + "d" * 64 in text
    assert packages.parse(text, cell.id) == lock
    packages.verify(packages.parse(text, cell.id), cell, "lock")
    assert packages.group_files(lock)["team"].startswith("numpy==2.4.0")
    # a changed requirements file is a stale lock, naming the key
    packages.write(tmp_path, lock)
    assert packages.stale([cell], tmp_path, True) == []
    (repo / "extra.txt").write_text("packaging>=25\n")
    (moved,) = cells(
        repo, '    pip: ["numpy>=2.4"]\n    requirements: ../requirements.txt\n'
        "    source: ../app\n    source_package: true\n",
    )  # fmt: skip
    (problem,) = packages.stale([moved], tmp_path, True)
    assert "team: locked" in problem and "packaging>=25" in problem


def test_a_team_pin_that_moves_the_stack_is_refused(repo: Path) -> None:
    (cell,) = cells(repo, '    pip: ["teamdep"]\n')
    lock = resolving.resolve(cell, team_resolver([]), "", None)
    bad = replace(
        lock, groups={**lock.groups, "team": (Pin("nvidia-nccl-cu12==2.28.0", ("c" * 64,)),)}
    )
    with pytest.raises(UsageError, match="nvidia-nccl-cu12 is the cell's stack"):
        packages.verify(packages.parse(packages.render_text(bad), cell.id), cell, "lock")


def test_a_lock_without_team_packages_reads_as_before(repo: Path) -> None:
    (cell,) = cells(repo)
    lock = resolving.resolve(cell, team_resolver([]), "", None)
    assert "team" not in lock.inputs and "# [team]" not in packages.render_text(lock)
    assert set(packages.group_files(lock)) == {"cuda", "torch", "features"}


def test_a_source_package_without_static_dependencies_keeps_the_stack_locked(
    repo: Path, tmp_path: Path
) -> None:
    (repo / "app" / "pyproject.toml").unlink()
    (repo / "app" / "setup.py").write_text("from setuptools import setup\nsetup()\n")
    block = '    pip: ["numpy>=2.4"]\n    source: ../app\n    source_package: true\n'
    (cell,) = cells(repo, block)
    assert cell.source_dependencies is None
    calls: list[tuple[list[str], list[str]]] = []
    folder = tmp_path / "locks"
    notes = resolving.lock_cells([cell], folder, team_resolver(calls), "", None)
    assert len(calls) == 1  # torch's resolution only: the team's is not resolved
    assert any("the team's packages are not locked" in n and "setup.py" in n for n in notes)
    assert any(n.endswith(": written") for n in notes)
    text = packages.lock_path(folder, cell.id).read_text()
    assert "# [torch]\n" in text and "\ntorch==2.13.0+cpu" in text and "# [team]" not in text
    lock = packages.read(folder, cell.id, cell)
    assert lock is not None and lock.inputs["source-package"] is None
    assert lock.inputs["team"] == ["numpy>=2.4"]
    assert packages.stale([cell], folder, True) == []  # a lock, not "cannot be locked"
    # the build stages the stack's groups (hashes and all) and no team.txt: the team's step
    # resolves the team's packages and the source package under the stack's constraints
    staged = context.stage(cell, tmp_path / "ctx", locks=folder) / "imagekit" / "locked"
    assert sorted(p.name for p in staged.iterdir()) == ["cuda.txt", "features.txt", "torch.txt"]
    assert "--hash=sha256:" + "a" * 64 in (staged / "torch.txt").read_text()
    dockerfile_text = render(cell)
    assert "--out /opt/imagekit/groups --locked /run/imagekit/locked" in dockerfile_text
    assert "team_install.py --locked /run/imagekit/locked --source /run/imagekit/source" in (
        " ".join(dockerfile_text.split())
    )
    # a team group in such a lock is one made by hand (the writer writes none)
    forged_text = packages.render_text(lock).replace(
        "# [features]\n", "# [features]\n# [team]\nnumpy==2.4.0 --hash=sha256:" + "d" * 64 + "\n"
    )
    with pytest.raises(UsageError, match="a team group in a lock whose team packages are not"):
        packages.verify(packages.parse(forged_text, cell.id), cell, "lock")


def test_team_install_finds_this_machines_staged_team_file(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    assert team_install.locked_team(locked, "x86_64") is None
    (locked / "team.txt").write_text("okpkg==1.0 \\\n    --hash=sha256:" + "a" * 64 + "\n")
    assert team_install.locked_team(locked, "x86_64") == locked / "team.txt"
    assert team_install.locked_team(locked, "aarch64") is None  # arm64's is its own folder


# A source package built by a backend of its own (no build requirements: the test is offline)
SOURCE_BACKEND = """\
import base64, hashlib, zipfile

DIST = "teamsrc-0.2.0"
FILES = {
    "teamsrc/__init__.py": "X = 2\\n",
    DIST + ".dist-info/METADATA": "Metadata-Version: 2.1\\nName: teamsrc\\nVersion: 0.2.0\\n"
    "Requires-Dist: numpyish\\nRequires-Dist: teamlib\\n",
    DIST + ".dist-info/WHEEL": "Wheel-Version: 1.0\\nGenerator: test\\n"
    "Root-Is-Purelib: true\\nTag: py3-none-any\\n",
}


def _digest(data):
    raw = hashlib.sha256(data.encode()).digest()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    name = DIST + "-py3-none-any.whl"
    record = "".join(f"{p},sha256={_digest(d)},{len(d)}\\n" for p, d in FILES.items())
    with zipfile.ZipFile(wheel_directory + "/" + name, "w") as whl:
        for path, data in FILES.items():
            whl.writestr(path, data)
        whl.writestr(DIST + ".dist-info/RECORD", record + DIST + ".dist-info/RECORD,,\\n")
    return name
"""
SOURCE_PYPROJECT = """\
[build-system]
requires = []
build-backend = "backend"
backend-path = ["."]

[project]
name = "teamsrc"
version = "0.2.0"
dependencies = ["numpyish", "teamlib"]
"""


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.subprocess
@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_team_install_installs_a_staged_lock_with_hashes(
    tmp_path: Path, wheels: Path, installer: str
) -> None:
    """The build's locked path, as the Dockerfile runs it: team.txt with --no-deps
    --require-hashes, then the source package with --no-deps (nothing resolved: teamlib, which
    the source package asks for and the lock does not hold, is not installed)."""
    python = stack_venv(tmp_path / "venv", wheels)
    source = tmp_path / "src"
    source.mkdir()
    (source / "backend.py").write_text(SOURCE_BACKEND)
    (source / "pyproject.toml").write_text(SOURCE_PYPROJECT)
    machine = platform.machine()
    if machine not in team_install.LOCKED_FOLDERS:
        pytest.skip(f"team_install.py locks only x86_64 and aarch64, not {machine}")
    locked = tmp_path / "locked"
    team_file = locked / team_install.LOCKED_FOLDERS[machine] / "team.txt"
    team_file.parent.mkdir(parents=True, exist_ok=True)
    okpkg = sha256_of(wheels / "okpkg-1.0-py3-none-any.whl")
    numpyish = sha256_of(wheels / "numpyish-2.0-py3-none-any.whl")
    team_file.write_text(
        f"numpyish==2.0 \\\n    --hash=sha256:{numpyish}\nokpkg==1.0 \\\n    --hash=sha256:{okpkg}\n"
    )
    options = ("--locked", str(locked), "--source", str(source))
    result = team_install_run(python, installer, wheels, options=options)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "installing the team's locked packages" in result.stdout
    after = installed(python)
    assert after["okpkg"] == "1.0" and after["numpyish"] == "2.0" and after["teamsrc"] == "0.2.0"
    assert after["torch"] == "2.13.0+cpu" and "teamlib" not in after  # --no-deps: no resolving
    # a wheel that is not the one locked fails the step and installs nothing
    fresh = stack_venv(tmp_path / "venv2", wheels)
    team_file.write_text(f"okpkg==1.0 \\\n    --hash=sha256:{'0' * 64}\n")
    bad = team_install_run(fresh, installer, wheels, options=options)
    assert bad.returncode != 0, bad.stdout + bad.stderr
    assert "hash" in (bad.stdout + bad.stderr).lower()
    assert "okpkg" not in installed(fresh) and "teamsrc" not in installed(fresh)


# --- the SBOM ----------------------------------------------------------------------------


def test_the_sbom_lists_the_team_packages_with_the_locks_hashes(tmp_path: Path) -> None:
    site = tmp_path / "site"
    for name, version in (("torch", "2.13.0"), ("teamdep", "1.0"), ("teamapp", "0.1.0")):
        info = site / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    locked = tmp_path / "locked"
    locked.mkdir()
    digest = hashlib.sha256(b"teamdep").hexdigest()
    (locked / "team.txt").write_text(f"teamdep==1.0 \\\n    --hash=sha256:{digest}\n")
    found = {c.name: c for c in sbom_writer.python_components(site, locked)}
    assert {"torch", "teamdep", "teamapp"} <= set(found)  # the source package too
    assert [h.content for h in found["teamdep"].hashes] == [digest]


def test_team_install_refuses_a_command_line_without_its_separator() -> None:
    with pytest.raises(SystemExit, match="usage"):
        team_install.parse_args(["pip", "install", "numpy"])
    options, command, reqs = team_install.parse_args(
        ["--locked", "/l", "--source", "/s", "pip", "install", "--", "a", "b"]
    )
    assert options == {"locked": Path("/l"), "source": Path("/s")}
    assert command == ["pip", "install"] and reqs == ["a", "b"]


@pytest.mark.subprocess
def test_lock_packages_names_a_team_package_that_needs_another_torch(
    repo: Path, wheels: Path, tmp_path: Path
) -> None:
    (cell,) = cells(repo, '    pip: ["okpkg"]\n')
    cell = replace(cell, torch_requirements=("torch==2.13.0+cpu",))
    resolver = functools.partial(resolving.uv_resolver, extra=["--no-index"])
    lock = resolving.resolve(cell, resolver, "", wheels)
    assert [p.requirement for p in lock.groups["team"]] == ["numpyish==2.0", "okpkg==1.0"]
    conflicting = replace(cell, pip=("teamlib",))
    with pytest.raises(resolving.TeamConflict) as raised:
        resolving.lock_cells([conflicting], tmp_path / "locks", resolver, "", wheels)
    assert "imagekit: teamlib asks for torch==2.8.0; this cell holds torch 2.13.0+cpu" in str(
        raised.value
    )
    assert not (tmp_path / "locks").exists()  # nothing written
