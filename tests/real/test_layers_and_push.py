"""The real engine: layers read from it, layers two images share, push time in the report,
and layer compression and cache export refused exactly where the engine cannot do them."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from devkit.realengine import (
    DOCKER,
    build_args,
    docker,
    engine_kind,
    imagekit,
)

from .conftest import CELL, TAG, pushed_report

pytestmark = [pytest.mark.docker, pytest.mark.slow]

EXTRA = 3_000_000  # bytes of the one layer the derived image adds


@pytest.mark.compat
def test_layers_and_the_ones_two_images_share(tmp_path: Path, project: Path) -> None:
    from imagekit.builder.build_report import CellReport, share_layers
    from imagekit.engine.docker import DockerEngine

    engine = DockerEngine()
    base = engine.layers(TAG)
    info = json.loads(docker("image", "inspect", TAG).stdout)[0]
    assert [x.diff_id for x in base] == info["RootFS"]["Layers"]
    # Uncompressed on both stores. The classic store's image size is the same sum; the
    # containerd store's adds its compressed blobs, and measures a layer by its unpacked
    # snapshot's disk usage (file-system blocks).
    containerd = engine_kind() == "containerd"
    if not containerd:
        assert sum(x.size for x in base) == info["Size"]
    assert any("/opt/venv" in x.created_by for x in base)

    # a second image on top of the first: every layer shared but the one it adds
    (tmp_path / "Dockerfile").write_text(
        f"FROM {TAG}\nUSER root\nRUN head -c {EXTRA} /dev/urandom > /extra.bin\n"
    )
    derived = "imagekit-test/derived:layers"
    subprocess.run(
        [DOCKER, "build", "-q", "-t", derived, str(tmp_path)],
        env={**os.environ, "DOCKER_BUILDKIT": "1"},
        check=True,
        capture_output=True,
        timeout=300,
    )
    try:
        on_top = engine.layers(derived)
    finally:
        docker("rmi", derived, check=False)
    assert [x.diff_id for x in on_top[: len(base)]] == [x.diff_id for x in base]
    assert len(on_top) == len(base) + 1
    slack = 64 * 1024 if containerd else 0  # a few blocks and the folder entries
    assert EXTRA <= on_top[-1].size <= EXTRA + slack and "urandom" in on_top[-1].created_by

    reports = [CellReport(cell="first"), CellReport(cell="second")]
    for r, layers in zip(reports, (base, on_top), strict=True):
        r.layers = [{"diff_id": x.diff_id, "size_bytes": x.size} for x in layers]
    share_layers(reports)
    assert reports[1].unique_bytes == on_top[-1].size
    assert reports[1].shared_bytes == sum(x.size for x in base)
    assert reports[0].layers[-1]["shared_with"] == ["second"]
    assert reports[1].layers[-1]["shared_with"] == []


@pytest.mark.compat
def test_the_session_build_reported_its_layers_and_push_time(project: Path) -> None:
    built = pushed_report(project)  # the session build: pushed through the engine (--load)
    diff_ids = json.loads(docker("image", "inspect", built["image_id"]).stdout)[0]["RootFS"]
    assert [x["diff_id"] for x in built["layers"]] == diff_ids["Layers"]
    # One cell: nothing to share with but itself. A layer the image holds twice (the same
    # bytes from two steps: the containerd store's snapshots of an empty change) is stored once.
    distinct = {x["diff_id"]: x["size_bytes"] for x in built["layers"]}
    assert built["unique_bytes"] == sum(distinct.values())
    assert built["unique_bytes"] + built["shared_bytes"] == sum(
        x["size_bytes"] for x in built["layers"]
    )
    assert built["size_bytes"] == sum(x["size_bytes"] for x in built["layers"])
    # --compression auto: zstd where BuildKit writes the pushed layers, else the engine's gzip
    compression = "zstd" if engine_kind() == "containerd" else "gzip"
    assert built["push_compression"] == compression and built["push_seconds"] > 0
    assert built["push_path"] == "engine" and built["sizes"] == "unpacked"  # --load


@pytest.mark.compat
def test_compression_and_cache_export_refusals_are_exact_on_each_engine(project: Path) -> None:
    kind = engine_kind()
    if kind == "containerd":
        pytest.skip("this engine exports both: see tests/real/test_buildx_paths.py")
    what, fix = {
        "builtin": (f"{DOCKER} ", "builds with Docker's built-in BuildKit"),
        "classic": (
            "the selected buildx builder uses the docker driver (the engine's own image store)",
            "or turn on the engine's containerd image store",
        ),
    }[kind]
    bundle = project / "ca-marked.pem"
    result = imagekit(*build_args(bundle, "--push", "--compression", "zstd"), cwd=project)
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"--compression zstd: {what}" in result.stderr and fix in result.stderr
    assert f"[{CELL}] build started" not in result.stdout  # refused first
    result = imagekit(
        *build_args(bundle, "--cache-to", "type=registry,ref=127.0.0.1:5000/c:c"), cwd=project
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert f"--cache-to type=registry,ref=127.0.0.1:5000/c:c: {what}" in result.stderr
