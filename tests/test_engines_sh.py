"""`.ci/engines.sh`: `wipe ENGINE` (the test suite empties an engine's data folder before and
after its phase) and the daemon.json it starts an engine with. Run against state, run and
prefix folders of the test's own (IMAGEKIT_ENGINES_STATE, _RUN, _PREFIX), with no daemon of
that engine running, so the host's engines are never touched; a running daemon is stopped and
wiped, and started with that daemon.json, by every run of scripts/test-all.sh."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).resolve().parents[1]


def wipe(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "IMAGEKIT_ENGINES_STATE": str(tmp_path / "state"),
        "IMAGEKIT_ENGINES_RUN": str(tmp_path / "run"),
        "IMAGEKIT_ENGINE_FILE": str(tmp_path / "engine.env"),
    }
    return subprocess.run(
        ["bash", str(ROOT / ".ci" / "engines.sh"), "wipe", *args],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def held(tmp_path: Path, engine: str) -> Path:
    data = tmp_path / "state" / engine
    (data / "containerd" / "daemon" / "io.containerd.content.v1.content").mkdir(parents=True)
    (data / "buildkit" / "cache.db").parent.mkdir(parents=True)
    (data / "buildkit" / "cache.db").write_bytes(b"x" * 1024)
    (data / "volumes" / "link").parent.mkdir(parents=True)
    (data / "volumes" / "link").symlink_to(tmp_path / "outside")
    return data


def deleted_in_the_background(tmp_path: Path) -> list[Path]:
    """What is left of the wiped folders after the background deletion had 30 s."""
    state = tmp_path / "state"
    for _ in range(300):
        left = sorted(state.glob(".wiping-*"))
        if not left:
            return []
        time.sleep(0.1)
    return left


def test_wipe_deletes_that_engines_data_folder_and_nothing_beside_it(tmp_path: Path) -> None:
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "kept").write_text("not the engine's")
    wiped, other = held(tmp_path, "classic"), held(tmp_path, "docker20")
    unfinished = tmp_path / "state" / ".wiping-containerd-1"  # an earlier wipe's, interrupted
    (unfinished / "buildkit").mkdir(parents=True)
    result = wipe(tmp_path, "classic")
    assert result.returncode == 0, result.stderr
    assert not wiped.exists()  # at once: moved aside
    assert f"classic wiped: {wiped} emptied" in result.stderr
    assert deleted_in_the_background(tmp_path) == []
    assert (other / "buildkit" / "cache.db").is_file()
    assert (tmp_path / "outside" / "kept").read_text() == "not the engine's"  # a link's target
    again = wipe(tmp_path, "classic")  # nothing there: still fine
    assert again.returncode == 0, again.stderr


@pytest.mark.parametrize("args", [(), ("podman",), ("../classic",)])
def test_wipe_names_an_engine_of_ours(tmp_path: Path, args: tuple[str, ...]) -> None:
    data = held(tmp_path, "classic")
    result = wipe(tmp_path, *args)
    assert result.returncode != 0
    assert "containerd, classic or docker20" in result.stderr or "no engine" in result.stderr
    assert data.is_dir()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting needs root")
def test_a_mount_a_killed_daemon_left_is_unmounted_not_emptied(tmp_path: Path) -> None:
    data = held(tmp_path, "containerd")
    shown = tmp_path / "shown"
    shown.mkdir()
    (shown / "file").write_text("behind a bind mount")
    point = data / "containerd" / "daemon" / "snapshot"
    point.mkdir()
    # dockerd bind-mounts its data folder onto itself: rm alone fails there, "busy"
    subprocess.run(["mount", "--bind", str(data), str(data)], check=True, timeout=30)
    subprocess.run(["mount", "--bind", str(shown), str(point)], check=True, timeout=30)
    try:
        result = wipe(tmp_path, "containerd")
    finally:
        for mount in (point, data):
            subprocess.run(["umount", "-l", str(mount)], check=False, timeout=30)
    assert result.returncode == 0, result.stderr
    assert not data.exists()
    assert deleted_in_the_background(tmp_path) == []
    assert (shown / "file").read_text() == "behind a bind mount"


def daemon_json(tmp_path: Path, engine: str, version: str) -> dict[str, object]:
    """engines.sh's daemon.json for ENGINE, its Docker 28 prefix holding a dockerd of `version`."""
    dockerd = tmp_path / "prefix" / "docker28" / "usr" / "sbin" / "dockerd"
    dockerd.parent.mkdir(parents=True)
    dockerd.write_text(f"#!/bin/sh\necho 'Docker version {version}, build 0'\n")
    dockerd.chmod(0o755)
    env = {**os.environ, "IMAGEKIT_ENGINES_PREFIX": str(tmp_path / "prefix"),
           "IMAGEKIT_ENGINES_STATE": str(tmp_path / "state")}  # fmt: skip
    script = f"source {ROOT / '.ci' / 'engines.sh'} && daemon_json {engine}"
    done = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60, check=True
    )
    return json.loads(done.stdout)  # type: ignore[no-any-return]


@pytest.mark.parametrize(("engine", "store"), [("containerd", True), ("classic", False)])
def test_docker_28_evicts_build_cache_only_near_a_full_disk(
    tmp_path: Path, engine: str, store: bool
) -> None:
    config = daemon_json(tmp_path, engine, "28.5.2+dfsg4")
    assert config["features"] == {"containerd-snapshotter": store}
    rules = config["builder"]["gc"]["policy"]  # type: ignore[index]
    assert config["builder"]["gc"]["enabled"] is True  # type: ignore[index]
    mounts, *rest = rules
    assert mounts["maxUsedSpace"] == "8GB" and "unused-for=48h" in mounts["filter"]
    assert [r["minFreeSpace"] for r in rest] == ["10GB"] * 3 and rest[-1]["all"] is True


def test_the_fallback_docker_26_keeps_its_own_collection(tmp_path: Path) -> None:
    config = daemon_json(tmp_path, "containerd", "26.1.5+dfsg1")
    assert config == {"features": {"containerd-snapshotter": True}}
