"""The real engine and registry: discovery, base bootstrap, the built image, push/pull, lock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devkit.realengine import (
    DEBIAN,
    REGISTRY,
    build_args,
    docker,
    imagekit,
    make_project,
    marked_ca_bundle,
    require_engine,
)

from .conftest import CELL, TAG, pushed_report, report, run_in_image

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.mark.compat
def test_engine_discovery_picks_buildkit() -> None:
    from imagekit.engine.discover import find_builder
    from imagekit.engine.docker import DockerEngine

    require_engine()
    builder = find_builder()
    assert builder.kind in {"buildx", "buildkit"}
    assert "builds with" in DockerEngine().describe()


def test_newer_cli_without_buildx_is_refused_with_a_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    from imagekit.engine.discover import cli_version, find_builder, has_buildx
    from imagekit.errors import EngineError

    # Docker 28's engine gives its own CLI a config folder with buildx in it: not this one's.
    monkeypatch.delenv("DOCKER_CONFIG", raising=False)
    new_cli = "/usr/local/bin/docker"
    version = cli_version(new_cli) if Path(new_cli).exists() else None
    if version is None or version.major < 23 or has_buildx(new_cli):
        pytest.skip("needs a Docker CLI >= 23 without buildx at /usr/local/bin/docker")
    with pytest.raises(EngineError, match="without the buildx plugin.*install the buildx plugin"):
        find_builder(new_cli)


def test_base_bootstrap_makes_a_real_debian_image(tmp_path: Path, debian_bookworm: str) -> None:
    """The base every real test builds on: `imagekit base bootstrap` made it in this run
    (conftest.py debian_bookworm, how it came), a Debian 12 that runs, with bootstrap's CMD and LANG;
    where an earlier phase made it, its root filesystem is bootstrapped here under a tag of
    its own (one debootstrap more, as before the bases were shared)."""
    image = DEBIAN
    if debian_bookworm != "bootstrap":
        image = "imagekit-test/bookworm-bootstrap:test"
        made = imagekit("base", "bootstrap", "--suite", "bookworm", "--tag", image, cwd=tmp_path)
        assert made.returncode == 0, made.stderr
    assert run_in_image(image, "cat", "/etc/debian_version").startswith("12.")
    config = json.loads(docker("image", "inspect", image).stdout)[0]["Config"]
    assert config["Cmd"] == ["bash"] and "LANG=C.UTF-8" in config["Env"]
    if image != DEBIAN:
        docker("rmi", image)


@pytest.mark.compat
def test_torch_imports_in_the_built_image(project: Path) -> None:
    out = run_in_image(TAG, "python", "-c", "import torch, onnxruntime; print(torch.__version__)")
    assert out.startswith("2.13.0")
    assert report(project)["status"] == "built"


def test_labels_user_and_environment(project: Path) -> None:
    info = json.loads(docker("image", "inspect", TAG).stdout)[0]["Config"]
    labels = info["Labels"]
    assert labels["io.imagekit.torch"] == "2.13.0" and labels["io.imagekit.cell"] == CELL
    assert labels["io.imagekit.features"] == "onnx-tensorrt"
    assert (
        labels["org.opencontainers.image.created"] == "2023-11-14T22:13:20+00:00"
    )  # tests' SOURCE_DATE_EPOCH
    assert info["User"] == "1000:1000"
    assert run_in_image(TAG, "id", "-u") == "1000"
    env = dict(e.split("=", 1) for e in info["Env"])
    assert env["IMAGEKIT_PROFILE"] == "single-node" and "OMP_NUM_THREADS" not in env
    assert run_in_image("--cpus", "1", TAG, "sh", "-c", "echo $OMP_NUM_THREADS") == "1"
    assert run_in_image("-e", "OMP_NUM_THREADS=3", TAG, "sh", "-c", "echo $OMP_NUM_THREADS") == "3"
    code = (project / "app" / "train.py").read_text().strip()
    assert run_in_image(TAG, "cat", "/workspace/train.py") == code


@pytest.mark.compat
def test_push_and_pull_by_digest(project: Path) -> None:
    built = pushed_report(project)  # the session build that pushed (TAG may be rebuilt since)
    pushed, image_id = built["pushed"], built["image_id"]
    assert len(pushed) == 2 and all("@sha256:" in ref for ref in pushed)
    layers = json.loads(docker("image", "inspect", image_id).stdout)[0]["RootFS"]["Layers"]
    docker("rmi", pushed[0], check=False)
    docker("pull", pushed[0])
    pulled = json.loads(docker("image", "inspect", pushed[0]).stdout)[0]
    if built["provenance"] == "attached":
        # an index (the image + its provenance): the same layers under another digest
        assert pulled["RootFS"]["Layers"] == layers and pulled["Id"] != image_id
    else:
        assert pulled["Id"] == image_id


def test_lock_pins_bases_from_a_real_registry(tmp_path: Path, project: Path) -> None:
    base = f"{REGISTRY}/debian:bookworm-slim"
    docker("tag", "debian:bookworm-slim", base)
    docker("push", base)
    root = make_project(tmp_path / "p")
    matrix = root / "envs" / "cpu.yaml"
    matrix.write_text(
        matrix.read_text().replace(
            "    source: ../app\n", f"    source: ../app\n    base: {base}\n"
        )
    )
    result = imagekit("lock", "--envs", "envs", cwd=root)
    assert result.returncode == 0, result.stderr
    pins = json.loads((root / "envs" / "images.lock").read_text())["images"]
    assert pins[base].startswith("sha256:")
    imagekit("render", "--envs", "envs", "--out", "df", cwd=root)
    dockerfile = next((root / "df").glob("*/Dockerfile")).read_text()
    assert f"FROM {base}@{pins[base]} AS os-base" in dockerfile


@pytest.mark.compat
def test_push_to_unreachable_registry_keeps_local_image(tmp_path: Path, project: Path) -> None:
    root = make_project(tmp_path / "p", registry="127.0.0.1:5999")
    result = imagekit(
        *build_args(project / "ca-marked.pem", "--push", "--load", "--progress", "quiet"),
        cwd=root,
    )
    assert result.returncode == 6, result.stdout
    assert (
        "push of 127.0.0.1:5999/imagekit-test:2.13.0-cpu-py3.11-debian12-slim failed"
        in result.stdout
    )
    assert "is kept" in result.stdout
    docker("image", "inspect", "127.0.0.1:5999/imagekit-test:2.13.0-cpu-py3.11-debian12-slim")


def test_daemon_not_running_is_a_clear_error(tmp_path: Path) -> None:
    root = make_project(tmp_path / "p")
    result = imagekit(
        "build",
        "--envs",
        "envs",
        "--ca-bundle",
        str(marked_ca_bundle(root)),
        cwd=root,
        env={"DOCKER_HOST": "unix:///tmp/imagekit-no-daemon.sock"},
    )
    assert result.returncode == 5
    assert "cannot reach the Docker daemon at unix:///tmp/imagekit-no-daemon.sock" in result.stderr
    assert "Start it" in result.stderr
