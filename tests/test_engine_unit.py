"""Engine command lines and packaging, without a daemon."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import pytest

from imagekit.engine.discover import Builder, check_engine_version
from imagekit.engine.docker import DockerEngine, split_ref
from imagekit.engine.interface import BuildRequest
from imagekit.errors import EngineError

from .conftest import ROOT


def engine_with(kind: str) -> DockerEngine:
    engine = DockerEngine()
    engine._builder = Builder("/usr/bin/docker", kind, "27.0.0")
    return engine


def test_buildx_builds_load_into_the_engine(tmp_path: Path) -> None:
    request = BuildRequest(
        context=tmp_path,
        dockerfile=tmp_path / "Dockerfile",
        secrets=(("ca", tmp_path / "ca.pem"),),
        cache_to=("type=registry,ref=r:c",),
    )
    args = engine_with("buildx").build_args(request, tmp_path / "iid")
    assert args[:5] == ["/usr/bin/docker", "buildx", "build", "--load", "--progress=plain"]
    assert f"id=ca,src={tmp_path / 'ca.pem'}" in args and "--cache-to" in args
    assert args[-1] == str(tmp_path)


def test_builtin_buildkit_sets_the_variable_and_refuses_cache_export(tmp_path: Path) -> None:
    engine = engine_with("buildkit")
    assert engine.builder.environment()["DOCKER_BUILDKIT"] == "1"
    plain = BuildRequest(context=tmp_path, dockerfile=tmp_path / "D", target="")
    assert "--target" not in engine.build_args(plain, tmp_path / "iid")
    with pytest.raises(EngineError, match="--cache-to needs docker buildx"):
        engine.build_args(
            BuildRequest(
                context=tmp_path, dockerfile=tmp_path / "D", cache_to=("type=local,dest=x",)
            ),
            tmp_path / "iid",
        )


def test_engine_version_floor() -> None:
    check_engine_version("20.10.24+dfsg1")
    with pytest.raises(EngineError, match="too old"):
        check_engine_version("19.03.15")


def test_split_ref() -> None:
    assert split_ref("127.0.0.1:5000/a/b:tag") == ("127.0.0.1:5000/a/b", "tag")
    assert split_ref("127.0.0.1:5000/a/b") == ("127.0.0.1:5000/a/b", "latest")


@pytest.mark.subprocess
def test_wheel_ships_templates_catalog_and_data(tmp_path: Path) -> None:
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    (wheel,) = tmp_path.glob("imagekit-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for needed in (
        "imagekit/_templates/Dockerfile.j2",
        "imagekit/_templates/context/entrypoint.sh",
        "imagekit/_envs/training.yaml",
        "imagekit/data/compat.yaml",
        "imagekit/selfcheck/registry.py",
        "imagekit/selfcheck/verdicts.py",
        "imagekit/runtime/threads.py",
    ):
        assert needed in names, needed
    # Installed from the wheel alone (no checkout on the path), it renders the catalog.
    target = tmp_path / "site"
    install = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target"]
    assert subprocess.run([*install, str(target), str(wheel)], check=False).returncode == 0
    out = tmp_path / "out"
    rendered = subprocess.run(
        [sys.executable, "-m", "imagekit", "render", "--out", str(out), "--cuda", "12.6"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(target)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert rendered.returncode == 0, rendered.stderr
    assert any(out.glob("cu126-*/Dockerfile"))
