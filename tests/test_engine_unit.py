"""Engine command lines and packaging, without a daemon."""

from __future__ import annotations

import inspect
import os
import zipfile
from pathlib import Path
from typing import Generic, Protocol

import pytest

from imagekit.engine.discover import ALLOW_ESTARGZ, Builder, check_engine_version, estargz_crash
from imagekit.engine.docker import DockerEngine
from imagekit.engine.docker_daemon import split_ref
from imagekit.engine.fake import FakeBuilder, FakeEngine, FakeRegistry, FakeRunner, FakeStore
from imagekit.engine.image_registry import pushed_digest
from imagekit.engine.interface import (
    BuildEngine,
    BuildRegistryEngine,
    BuildRequest,
    Compression,
    Engine,
    ImageStore,
    RegistryEngine,
    RunEngine,
    RunRegistryEngine,
)
from imagekit.errors import EngineError

from .conftest import ROOT


def engine_with(kind: str, driver: str = "", containerd_store: bool | None = False) -> DockerEngine:
    """A DockerEngine with its builder set; containerd_store None: read from the daemon."""
    engine = DockerEngine()
    engine._builder = Builder("/usr/bin/docker", kind, "27.0.0", driver)
    engine._containerd_store = containerd_store
    return engine


def request_in(tmp_path: Path, **more: object) -> BuildRequest:
    return BuildRequest(context=tmp_path, dockerfile=tmp_path / "Dockerfile", **more)  # type: ignore[arg-type]


def test_buildx_on_the_classic_store_loads_into_the_engine(tmp_path: Path) -> None:
    request = request_in(
        tmp_path, secrets=(("ca", tmp_path / "ca.pem"),), cache_to=("type=registry,ref=r:c",)
    )
    args = engine_with("buildx", "docker").build_args(request, tmp_path / "iid", tmp_path / "m")
    assert args[:5] == [
        "/usr/bin/docker",
        "buildx",
        "build",
        "--progress=plain",
        "--provenance=false",
    ]
    assert "--load" in args and "--output" not in args
    assert args[args.index("--metadata-file") + 1] == str(tmp_path / "m")
    assert f"id=ca,src={tmp_path / 'ca.pem'}" in args and "--cache-to" in args
    assert args[-1] == str(tmp_path)


@pytest.mark.parametrize(
    ("push", "output"),
    [
        (None, "type=image,compression=uncompressed"),
        (Compression(), "type=image,compression=gzip,force-compression=true"),
        (
            Compression("zstd", 3),
            "type=image,compression=zstd,compression-level=3,force-compression=true,"
            "oci-mediatypes=true",
        ),
    ],
    ids=["local", "gzip-push", "zstd-push"],
)
def test_buildx_on_the_containerd_store_exports_once_in_the_push_compression(
    tmp_path: Path, push: Compression | None, output: str
) -> None:
    engine = engine_with("buildx", "docker", containerd_store=True)
    args = engine.build_args(
        request_in(tmp_path, push_compression=push), tmp_path / "i", tmp_path / "m"
    )
    assert "--load" not in args
    assert args[args.index("--output") + 1] == output
    assert engine.pushes_as_stored(push or Compression("zstd"))


def test_only_a_content_store_export_pushes_other_compressions_as_stored() -> None:
    assert engine_with("buildx", "docker").pushes_as_stored(Compression())
    assert not engine_with("buildx", "docker").pushes_as_stored(Compression("zstd"))
    assert not engine_with("buildx", "docker-container", True).pushes_as_stored(Compression("zstd"))
    assert not engine_with("buildkit").pushes_as_stored(Compression("gzip", 9))


def test_builtin_buildkit_sets_the_variable_and_refuses_cache_export(tmp_path: Path) -> None:
    engine = engine_with("buildkit")
    assert engine.builder.environment()["DOCKER_BUILDKIT"] == "1"
    plain = BuildRequest(context=tmp_path, dockerfile=tmp_path / "D", target="")
    args = engine.build_args(plain, tmp_path / "iid", tmp_path / "m")
    assert args[:3] == ["/usr/bin/docker", "build", "--progress=plain"]
    assert "--target" not in args and "--metadata-file" not in args
    with pytest.raises(EngineError, match="--cache-to needs docker buildx"):
        engine.build_args(
            BuildRequest(
                context=tmp_path, dockerfile=tmp_path / "D", cache_to=("type=local,dest=x",)
            ),
            tmp_path / "iid",
            tmp_path / "m",
        )


def test_inline_cache_only_when_asked_and_through_the_build_arg_without_buildx(
    tmp_path: Path,
) -> None:
    """Inline cache makes the image config unstable (moby/buildkit#1876): no engine writes it
    unless `--cache-to type=inline` asks; a CLI without buildx asks with the build argument."""
    inline_arg = "BUILDKIT_INLINE_CACHE=1"
    for kind, driver in (("buildkit", ""), ("buildx", "docker")):
        args = engine_with(kind, driver).build_args(
            request_in(tmp_path), tmp_path / "i", tmp_path / "m"
        )
        assert inline_arg not in args and "--cache-to" not in args
    asked = request_in(tmp_path, cache_to=("type=inline",))
    builtin = engine_with("buildkit").build_args(asked, tmp_path / "i", tmp_path / "m")
    assert builtin[builtin.index("--build-arg") + 1] == inline_arg and "--cache-to" not in builtin
    buildx = engine_with("buildx", "docker").build_args(asked, tmp_path / "i", tmp_path / "m")
    assert buildx[buildx.index("--cache-to") + 1] == "type=inline" and inline_arg not in buildx
    both = request_in(tmp_path, cache_to=("type=inline", "type=local,dest=x"))
    with pytest.raises(EngineError, match="--cache-to needs docker buildx"):
        engine_with("buildkit").build_args(both, tmp_path / "i", tmp_path / "m")


def test_a_push_keeps_inline_cache_in_the_image_and_leaves_the_export_to_the_build(
    tmp_path: Path,
) -> None:
    request = request_in(tmp_path, cache_to=("type=inline", "type=registry,ref=r:c,mode=max"))
    args = engine_with("buildx", "docker-container").push_args(
        request, ["r/a:1"], Compression("zstd"), tmp_path / "m"
    )
    assert [args[i + 1] for i, a in enumerate(args) if a == "--cache-to"] == ["type=inline"]


DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("event", "digest"),
    [
        ({"aux": {"Tag": "t", "Digest": DIGEST, "Size": 529}}, DIGEST),  # classic store
        ({"status": f"t: digest: {DIGEST} size: 856"}, DIGEST),  # containerd store
        ({"status": "Pushed", "progressDetail": {}, "id": "12ab"}, ""),
        ({"aux": "not a record"}, ""),
    ],
)
def test_pushed_digest_from_either_store(event: dict[str, object], digest: str) -> None:
    assert pushed_digest(event) == digest


@pytest.mark.parametrize(
    ("go", "refused"),
    [
        ("go1.27.1", True),  # Debian unstable's docker.io 28.5.2
        ("go1.28", True),
        ("go1.24.9", False),  # Docker's own 28.5 builds
        ("go1.19.8", False),  # Debian 12's 20.10
        ("", False),  # unknown: BuildKit decides
    ],
)
def test_estargz_is_refused_where_it_would_crash_the_daemon(
    go: str, refused: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ALLOW_ESTARGZ, raising=False)
    problems = estargz_crash("28.5.2+dfsg4", go)
    assert bool(problems) is refused
    if refused:
        assert problems[0].startswith(
            f"--compression estargz: Docker engine 28.5.2+dfsg4 was built with {go}"
        )
        assert "stargz-snapshotter#2330" in problems[0] and f"{ALLOW_ESTARGZ}=1" in problems[0]
    monkeypatch.setenv(ALLOW_ESTARGZ, "1")
    assert estargz_crash("28.5.2+dfsg4", go) == []


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
        "imagekit/_workflows/images.yml",
        "imagekit/data/compat.yaml",
        "imagekit/data/init/matrix.yaml.j2",
        "imagekit/data/init/dockerignore",
        "imagekit/data/init/workflow-header.yml",
        "imagekit/selfcheck/run/registry.py",
        "imagekit/selfcheck/verdicts/rules.py",
        "imagekit/runtime/threads.py",
    ):
        assert needed in names, needed
    # Installed from the wheel alone (no checkout on the path), it renders the catalog.
    target = tmp_path / "site"
    install = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target"]
    assert subprocess.run([*install, str(target), str(wheel)], check=False).returncode == 0
    out = tmp_path / "out"
    render = ["render", "--envs", "builtin:training", "--out", str(out), "--cuda", "12.6"]
    rendered = subprocess.run(
        [sys.executable, "-m", "imagekit", *render],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(target)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert rendered.returncode == 0, rendered.stderr
    assert any(out.glob("*cu126-*/Dockerfile"))
    # ... and `imagekit init` writes its workflow from the wheel's copy of images.yml
    started = subprocess.run(
        [sys.executable, "-m", "imagekit", "init", "proj"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(target)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert started.returncode == 0, started.stderr
    workflow = (tmp_path / "proj" / ".github" / "workflows" / "images.yml").read_text()
    assert 'pip install "$IMAGEKIT_INSTALL"' in workflow


# -- the interface's parts, and what implements them -----------------------------------------


def asked_of(part: type) -> dict[str, inspect.Signature]:
    """The methods a Protocol asks for, with those of the parts it is made of."""
    return {
        name: inspect.signature(value)
        for cls in part.__mro__
        if cls not in (Protocol, Generic, object)
        for name, value in vars(cls).items()
        if callable(value) and not name.startswith("_")
    }


def test_engine_is_its_parts_and_no_method_is_in_two() -> None:
    parts = [asked_of(ImageStore), asked_of(BuildEngine), asked_of(RunEngine)]
    parts.append(asked_of(RegistryEngine))
    build_own = set(parts[1]) - set(parts[0])
    run_own = set(parts[2]) - set(parts[0])
    assert not build_own & run_own and not (build_own | run_own) & set(parts[3])
    assert set(asked_of(Engine)) == set().union(*parts)
    assert set(asked_of(BuildRegistryEngine)) == set(parts[1]) | set(parts[3])
    assert set(asked_of(RunRegistryEngine)) == set(parts[2]) | set(parts[3])


@pytest.mark.parametrize(
    ("implementation", "part"),
    [
        (FakeStore, ImageStore),
        (FakeBuilder, BuildEngine),
        (FakeRunner, RunEngine),
        (FakeRegistry, RegistryEngine),
        (FakeEngine, Engine),
        (DockerEngine, Engine),
    ],
)
def test_each_fake_and_the_docker_engine_take_what_their_part_asks(
    implementation: type, part: type
) -> None:
    """A fake of one part is whole, and takes each method's arguments by the same names."""
    for name, asked in asked_of(part).items():
        method = getattr(implementation, name, None)
        assert callable(method), f"{implementation.__name__} lacks {name}"
        taken = inspect.signature(method)
        assert list(taken.parameters) == list(asked.parameters), f"{implementation.__name__}.{name}"
