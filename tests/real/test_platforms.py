"""linux/arm64 beside linux/amd64, for real (issue 39): a base of both platforms made with
debootstrap (arm64 under QEMU) and loaded as one index; a cell's OS stage built for both and
pushed as one image index, each platform's report read back from the registry; the base
pushed and locked, images.lock holding each platform's manifest digest; one arm64
image built locally and run under QEMU; and the engines that cannot hold an index refuse one
before building anything."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from ..realengine import (
    REGISTRY,
    docker,
    engine_kind,
    imagekit,
    marked_ca_bundle,
    registry_get,
    require_exporter,
)

pytestmark = [pytest.mark.docker, pytest.mark.slow]

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
ANY_MANIFEST = (
    "application/vnd.oci.image.manifest.v1+json,"
    "application/vnd.docker.distribution.manifest.v2+json"
)
BOTH = "linux/amd64,linux/arm64"


def project(root: Path, repository: str, base: str) -> Path:
    """A CPU cell of torch 2.7.1 for both platforms (amd64's torch from the cpu index,
    arm64's from PyPI), on a base of the test's own; only its OS stage is built here."""
    (root / "envs").mkdir(parents=True)
    (root / "envs" / "grace.yaml").write_text(
        f"registry: {REGISTRY}\nrepository: {repository}\n"
        "matrix:\n"
        "  - {cuda: cpu, torch: '2.7.1', python: '3.11', os: debian12, flavor: slim,\n"
        f"     compile: false, base: '{base}', platform: [linux/amd64, linux/arm64]}}\n"
    )
    return root


def build(root: Path, *more: str) -> dict:  # type: ignore[type-arg]
    result = imagekit(
        "build", "--target", "os-base", "--ca-bundle", str(marked_ca_bundle(root)),
        "--progress", "plain", *more, cwd=root, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (cell,) = (root / "reports").iterdir()
    return json.loads((cell / "build.json").read_text())  # type: ignore[no-any-return]


def machine(image: str, platform: str) -> str:
    return docker("run", "--rm", "--platform", platform, image, "uname", "-m").stdout.strip()


def test_a_cell_of_both_platforms_is_one_pushed_index_reported_per_platform(
    tmp_path: Path,
) -> None:
    require_exporter()
    run = uuid.uuid4().hex[:8]
    base = f"imagekit-test/debian-both-{run}:bookworm"
    made = imagekit("base", "bootstrap", "--platform", BOTH, "--tag", base, cwd=tmp_path)
    assert made.returncode == 0, made.stderr[-3000:]
    try:
        # one name, both platforms: the arm64 root runs under QEMU
        assert machine(base, "linux/arm64") == "aarch64"
        assert machine(base, "linux/amd64") == "x86_64"
        repository = f"imagekit-grace-{run}"
        root = project(tmp_path / "p", repository, base)
        report = build(root, "--platform", BOTH, "--push", "--no-attach-sbom")
        assert report["status"] == "built" and report["push_path"] == "builder"
        assert report["platforms"] == ["linux/amd64", "linux/arm64"]
        pushed = report["pushed"][0].split("@")[1]  # the index's digest
        index = json.loads(registry_get(f"{repository}/manifests/{pushed}", accept=OCI_INDEX))
        by_arch = {
            m["platform"]["architecture"]: m["digest"]
            for m in index["manifests"]
            if m["platform"].get("os") == "linux"
        }
        assert set(by_arch) == {"amd64", "arm64"}
        for platform, arch in (("linux/amd64", "amd64"), ("linux/arm64", "arm64")):
            entry = report["by_platform"][platform]
            assert entry["image_id"] == by_arch[arch]  # read back from the registry
            image = json.loads(
                registry_get(f"{repository}/manifests/{by_arch[arch]}", accept=ANY_MANIFEST)
            )
            config = json.loads(
                registry_get(f"{repository}/blobs/{image['config']['digest']}", accept="*/*")
            )
            assert config["architecture"] == arch
            assert entry["size_bytes"] == sum(layer["size"] for layer in image["layers"])
        locks_each_platform_of_a_pushed_base(tmp_path, base, run)
        each_platform_carries_its_own_archs(tmp_path, f"{REGISTRY}/{repository}@{pushed}", run)
        # one platform, not pushed: a local arm64 image, run under QEMU
        local = build(root, "--platform", "linux/arm64")
        assert local["status"] == "built" and local["platforms"] == ["linux/arm64"]
        # its layers measured, though BuildKit unpacks only the engine's own platform
        apt = next(x for x in local["layers"] if "apt-get install" in x["created_by"])
        assert apt["size_bytes"] > 10**6
        assert machine(local["tags"][0], "linux/arm64") == "aarch64"
        docker("rmi", "-f", *local["tags"], check=False)
    finally:
        docker("rmi", "-f", base, check=False)


ROOT = Path(__file__).resolve().parents[2]
# A committed cell of both platforms whose torch wheels are built for other GPUs on each.
TWO_ARCH_CELL = "cu130-torch2.14.1-py3.12-ubuntu24.04-slim"
AMD64_ARCHS = "7.5 8.0 8.6 9.0 10.0 12.0"
ARM64_ARCHS = "8.0 9.0 10.0 11.0 12.0"


def each_platform_carries_its_own_archs(tmp_path: Path, os_base: str, run: str) -> None:
    """The committed Dockerfile's stages after runtime-common, as rendered, built by BuildKit
    for each platform: TARGETARCH picks runtime-arm64 for arm64, whose label and labels.json
    say arm64's archs; amd64's keep runtime-common's. runtime-common itself (a CUDA torch:
    GBs under QEMU) is stood in for by the pushed OS stage with the labels it would have."""
    rendered = (ROOT / "dockerfiles" / TWO_ARCH_CELL / "Dockerfile").read_text()
    tail = rendered[rendered.index("FROM runtime-common AS runtime-amd64") :]
    labels = json.dumps({"io.imagekit.archs": AMD64_ARCHS, "io.imagekit.cell": TWO_ARCH_CELL})
    (tmp_path / "archs").mkdir()
    (tmp_path / "archs" / "Dockerfile").write_text(
        f"FROM {os_base} AS runtime-common\n"
        "RUN mkdir -p /opt/venv/bin /etc/imagekit && ln -s /usr/bin/python3 /opt/venv/bin/python"
        f" && echo '{labels}' > /etc/imagekit/labels.json\n"
        f'LABEL io.imagekit.archs="{AMD64_ARCHS}"\n\n{tail}'
    )
    for platform, want in (("linux/amd64", AMD64_ARCHS), ("linux/arm64", ARM64_ARCHS)):
        tag = f"imagekit-test/archs-{run}:{platform.rpartition('/')[2]}"
        docker(
            "build", "-q", "--platform", platform, "-t", tag, str(tmp_path / "archs"), timeout=600
        )
        try:
            config = json.loads(docker("image", "inspect", tag).stdout)[0]["Config"]
            assert config["Labels"]["io.imagekit.archs"] == want
            copy = docker("run", "--rm", "--platform", platform, "--entrypoint", "cat", tag,
                          "/etc/imagekit/labels.json").stdout  # fmt: skip
            assert json.loads(copy) == {
                "io.imagekit.archs": want,
                "io.imagekit.cell": TWO_ARCH_CELL,
            }
        finally:
            docker("rmi", "-f", tag, check=False)


def locks_each_platform_of_a_pushed_base(tmp_path: Path, base: str, run: str) -> None:
    """`imagekit lock` pins the base's index and records each platform's manifest in it,
    read back from the registry by digest."""
    pushed = f"{REGISTRY}/imagekit-base-both-{run}:bookworm"
    docker("tag", base, pushed)
    try:
        docker("push", "-q", pushed)
        root = project(tmp_path / "locked", f"imagekit-grace-lock-{run}", pushed)
        result = imagekit("lock", cwd=root, timeout=300)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        lock = json.loads((root / "envs" / "images.lock").read_text())
        digest = lock["images"][pushed]
        name = pushed.split("/", 1)[1].split(":")[0]
        index = json.loads(registry_get(f"{name}/manifests/{digest}", accept=OCI_INDEX))
        want = {
            f"linux/{m['platform']['architecture']}": m["digest"]
            for m in index["manifests"]
            if m["platform"].get("os") == "linux"
        }
        assert lock["platforms"][pushed] == want
        assert set(want) == {"linux/amd64", "linux/arm64"}
    finally:
        docker("rmi", pushed, check=False)


@pytest.mark.compat
def test_an_engine_that_cannot_hold_an_index_refuses_one_before_building(
    tmp_path: Path,
) -> None:
    if engine_kind() == "containerd":
        pytest.skip("the containerd image store holds an index: the test above builds one")
    root = project(tmp_path / "p", "imagekit-grace-refused", "debian:bookworm-slim")
    result = imagekit(
        "build", "--target", "os-base", "--platform", BOTH, "--push", cwd=root, timeout=300
    )
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-2000:]
    assert f"--platform {BOTH}:" in result.stderr
    assert "containerd image store" in result.stderr
    assert not (root / "reports").exists()  # nothing built, nothing written
