"""CUDA extensions in the builder (flash-attn): compiled only for the cell's GPUs, with
MAX_JOBS from its CPUs and memory, and replaced by a prebuilt wheel from --wheelhouse.

The shell functions are the real templates/context/build-env.sh; the installs are real pip
and uv runs against a local index whose newer flash-attn sdist fails to build, so a test
passes only if the wheelhouse's wheel was really taken instead of compiling."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml

from imagekit.locks.pinned import load_cells
from imagekit.matrix import cell_installs, compat

from .conftest import ROOT

BUILD_ENV = ROOT / "templates" / "context" / "build-env.sh"
pytestmark = pytest.mark.subprocess


def sh(script: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """`script` in /bin/sh after sourcing build-env.sh, as an install step runs it."""
    return subprocess.run(
        ["/bin/sh", "-c", f". {BUILD_ENV}; {script}"],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    )


def meminfo(tmp_path: Path, gigabytes: int) -> str:
    path = tmp_path / f"meminfo-{gigabytes}"
    path.write_text(f"MemTotal: 999999999 kB\nMemAvailable: {gigabytes * 1024 * 1024} kB\n")
    return str(path)


def test_max_jobs_follow_cpus_and_nine_gigabytes_each(tmp_path: Path) -> None:
    # the CPUs this process may use, as nproc counts them (taskset, a container's cpuset)
    cpus = len(os.sched_getaffinity(0))

    def jobs(gigabytes: int, cgroup: str = "max") -> int:
        limit = tmp_path / "memory.max"
        limit.write_text(cgroup + "\n")
        out = sh(
            "imagekit_max_jobs",
            IMAGEKIT_MEMINFO=meminfo(tmp_path, gigabytes),
            IMAGEKIT_CGROUP_MEMORY=str(limit),
        )
        return int(out.stdout)

    assert jobs(4) == 1  # never zero
    assert jobs(19) == min(cpus, 2)
    assert jobs(2000) == cpus  # plenty of memory: the CPUs decide
    assert jobs(2000, cgroup=str(10 * 1024**3)) == 1  # the cgroup's limit wins when lower


def fake_wheel(folder: Path, version: str) -> Path:
    """A minimal flash_attn wheel with the tags of a real prebuilt one."""
    folder.mkdir(parents=True, exist_ok=True)
    py = f"cp{sys.version_info.major}{sys.version_info.minor}"
    path = folder / f"flash_attn-{version}-{py}-{py}-linux_x86_64.whl"
    info = f"flash_attn-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as whl:
        whl.writestr("flash_attn/__init__.py", f"__version__ = '{version}'\nPREBUILT = True\n")
        whl.writestr(
            f"{info}/METADATA", f"Metadata-Version: 2.1\nName: flash_attn\nVersion: {version}\n"
        )
        whl.writestr(
            f"{info}/WHEEL",
            f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: false\nTag: {py}-{py}-linux_x86_64\n",
        )
        whl.writestr(f"{info}/RECORD", "")
    return path


def failing_sdist(folder: Path, version: str) -> None:
    """A newer flash-attn sdist whose build fails: taking it means compiling."""
    folder.mkdir(parents=True, exist_ok=True)
    files = {
        "setup.py": "raise SystemExit('imagekit test: flash-attn would compile here')\n",
        "PKG-INFO": f"Metadata-Version: 2.1\nName: flash_attn\nVersion: {version}\n",
    }
    with tarfile.open(folder / f"flash_attn-{version}.tar.gz", "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            member = tarfile.TarInfo(f"flash_attn-{version}/{name}")
            member.size = len(data)
            tar.addfile(member, io.BytesIO(data))


def test_prebuilt_pins_the_wheelhouse_version(tmp_path: Path) -> None:
    wheelhouse = tmp_path / "wheelhouse"
    wheelhouse.mkdir()
    assert sh("imagekit_prebuilt flash-attn", IMAGEKIT_WHEELHOUSE=str(wheelhouse)).stdout == ""
    fake_wheel(wheelhouse, "2.8.3")
    out = sh("imagekit_prebuilt flash-attn", IMAGEKIT_WHEELHOUSE=str(wheelhouse))
    assert out.stdout == "flash-attn==2.8.3\n"


def test_prebuilt_names_are_normalized_as_wheel_files_spell_them() -> None:
    # imagekit_prebuilt turns - into _ to find NAME-*.whl: a name spelled Flash_Attn in the
    # data must reach it as flash-attn (the wheel is flash_attn-2.8.3-...), not as written.
    text = compat.COMPAT_FILE.read_text().replace('"flash-attn>=2.6,<3"', '"Flash_Attn>=2.6,<3"')
    data = compat.parse(yaml.safe_load(text))
    (step,) = cell_installs.feature_steps(data, ("flash-attn",), "12.6", ("8.0", "9.0"))
    assert step.prebuilt == ("flash-attn",)
    assert step.requirements == ("Flash_Attn>=2.6,<3",)  # what pip installs stays as written


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    return path


@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_a_wheelhouse_wheel_is_installed_instead_of_compiling(
    tmp_path: Path, venv: Path, installer: str
) -> None:
    wheelhouse, index = tmp_path / "wheelhouse", tmp_path / "index"
    fake_wheel(wheelhouse, "2.8.3")
    failing_sdist(index, "2.8.4")
    uv = Path(sys.executable).parent / "uv"
    if installer == "uv" and not uv.exists():
        pytest.fail("uv is a dev dependency: scripts/dev-setup.sh installs it")
    install = (
        f"{venv}/bin/pip install --no-index --disable-pip-version-check"
        if installer == "pip"
        else f"{uv} pip install --python {venv}/bin/python --no-index"
    )
    reinstall = "--force-reinstall" if installer == "pip" else "--reinstall"

    def step(wheels: Path) -> str:
        return (
            "imagekit_prebuilt flash-attn > constraints.txt && "
            f"{install} --find-links {wheels} --find-links {index} --no-build-isolation "
            f"{reinstall} --constraint constraints.txt 'flash-attn>=2.6,<3'"
        )

    result = sh(step(wheelhouse), cwd=tmp_path, IMAGEKIT_WHEELHOUSE=str(wheelhouse))
    assert result.returncode == 0, result.stdout + result.stderr
    check = subprocess.run(
        [f"{venv}/bin/python", "-c", "import flash_attn; print(flash_attn.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert check.stdout.strip() == "2.8.3"
    # without the wheelhouse the newer sdist is taken, and its build runs (and fails here)
    empty = tmp_path / "empty"
    empty.mkdir()
    result = sh(step(empty), cwd=tmp_path, IMAGEKIT_WHEELHOUSE=str(empty))
    assert result.returncode != 0
    assert "flash-attn would compile here" in result.stdout + result.stderr


def test_flash_attn_compiles_only_for_the_cells_gpus() -> None:
    cells = {c.id: c for c in load_cells([ROOT / "envs"])}
    hopper = cells[
        "pytorch-train-cu126-torch2.10.0-py3.12-ubuntu24.04-nvidia"
    ]  # cu126: up to sm_90
    (step,) = [s for s in hopper.feature_steps if s.name == "flash-attn"]
    env = dict(step.env)
    assert env["FLASH_ATTN_CUDA_ARCHS"] == "80;90"
    assert env["TORCH_CUDA_ARCH_LIST"] == "5.0;6.0;7.0;7.5;8.0;8.6;9.0"
    assert env["MAX_JOBS"] == "${MAX_JOBS:-$(imagekit_max_jobs)}"
    blackwell = cells["pytorch-train-cu128-torch2.10.0-py3.12-ubuntu24.04-nvidia"]
    (step,) = [s for s in blackwell.feature_steps if s.name == "flash-attn"]
    assert dict(step.env)["FLASH_ATTN_CUDA_ARCHS"] == "80;90;100;120"
    text = (ROOT / "dockerfiles" / blackwell.id / "Dockerfile").read_text()
    assert 'FLASH_ATTN_CUDA_ARCHS="80;90;100;120"' in text
    assert (
        "--constraint /tmp/imagekit-prebuilt.txt" in text
        and "rm /tmp/imagekit-prebuilt.txt" in text
    )
