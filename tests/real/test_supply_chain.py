"""Supply chain for real: the session's image pushed to the local registry (registry 2.8, no
referrers API) with its SBOM attached and provenance where the engine holds it; a passing
self-check attested with cosign and verified by `imagekit verify` and by cosign itself;
a moved tag, another key, another GPU model and a failed run all refused."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from devkit.realengine import (
    ANY_MANIFEST,
    OCI_INDEX,
    REGISTRY,
    docker,
    engine_kind,
    imagekit,
    registry_get,
)
from imagekit.supply.attestation import PREDICATE_TYPE

from .conftest import TAG, pushed_report

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ATTESTED = f"{REGISTRY}/imagekit-attest"  # a repository of its own: the tag is moved here


def tool(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(args), capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two cosign key pairs (no password), made by cosign itself."""
    found = {}
    for name in ("ours", "other"):
        folder = tmp_path_factory.mktemp(name)
        result = subprocess.run(
            ["cosign", "generate-key-pair"], cwd=folder, capture_output=True, text=True,
            env={**os.environ, "COSIGN_PASSWORD": ""}, timeout=60, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        found[name], found[f"{name}.pub"] = folder / "cosign.key", folder / "cosign.pub"
    return found


def test_the_sbom_is_in_the_image_valid_and_its_writer_is_not(project: Path) -> None:
    result = imagekit("sbom", TAG, "--from", "image", cwd=project)
    assert result.returncode == 0, result.stderr
    assert JsonStrictValidator(SchemaVersion.V1_6).validate_str(result.stdout) is None
    doc = json.loads(result.stdout)
    purls = {c["purl"] for c in doc["components"]}
    assert "pkg:pypi/torch@2.13.0%2Bcpu" in purls
    assert any(
        p.startswith("pkg:deb/debian/python3.11@") and "distro=debian-12" in p for p in purls
    )
    assert doc["metadata"]["component"]["name"] == pushed_report(project)["cell"]
    # the library that wrote it is in no layer, and nothing of its mount is left
    probe = "import importlib.util as u, os; print(u.find_spec('cyclonedx'), os.path.exists('/run/imagekit/sbom-tool'))"
    assert docker("run", "--rm", TAG, "python", "-c", probe).stdout.strip() == "None False"


def test_the_sbom_is_attached_to_the_pushed_digest(project: Path) -> None:
    built = pushed_report(project)
    assert built["sbom"] and all("@sha256:" in ref for ref in built["sbom"])
    pushed = built["pushed"][0]
    found = json.loads(tool("oras", "discover", "--plain-http", "--format", "json", pushed).stdout)
    kinds = [r.get("artifactType") for r in found["referrers"]]
    assert "application/vnd.cyclonedx+json" in kinds
    in_image = imagekit("sbom", TAG, "--from", "image", cwd=project).stdout
    in_registry = imagekit("sbom", pushed, "--from", "registry", cwd=project)
    assert in_registry.returncode == 0, in_registry.stderr
    assert in_registry.stdout == in_image  # byte for byte
    summary = imagekit("sbom", pushed, "--from", "registry", "--summary", cwd=project)
    assert summary.returncode == 0 and "torch" in summary.stdout and "2.13.0+cpu" in summary.stdout


@pytest.mark.compat
def test_provenance_rides_on_the_push_where_the_engine_can_hold_it(project: Path) -> None:
    built = pushed_report(project)
    repo, digest = built["pushed"][0].removeprefix(f"{REGISTRY}/").split("@")
    accept = f"{ANY_MANIFEST},{OCI_INDEX}"
    pushed = json.loads(registry_get(f"{repo}/manifests/{digest}", accept=accept))
    if engine_kind() != "containerd":
        assert built["provenance"] == "unsupported" and pushed.get("mediaType") != OCI_INDEX
        return
    assert built["provenance"] == "attached" and pushed["mediaType"] == OCI_INDEX
    kinds = [m.get("annotations", {}).get("vnd.docker.reference.type") for m in pushed["manifests"]]
    assert kinds == [None, "attestation-manifest"]
    # the local image is not this index (store=false): a no-op rebuild keeps its ID
    # (test_rebuilds.py, which runs after this push)


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("snapshot") / "host.json"


@pytest.fixture(scope="module")
def attested(project: Path, keys: dict[str, Path], snapshot: Path) -> str:
    """The session's image copied to a repository of its own and attested there."""
    docker("tag", TAG, f"{ATTESTED}:t")
    docker("push", f"{ATTESTED}:t")
    result = imagekit(
        "test", f"{ATTESTED}:t", "--checks", "stack,amp", "--attest", str(keys["ours"]),
        "--snapshot", str(snapshot), cwd=project, env={"COSIGN_PASSWORD": ""},
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    line = next(x for x in result.stdout.splitlines() if x.startswith("attested: "))
    return line.split()[1]  # name@sha256:...


def test_a_passing_run_is_attested_and_verifies(
    project: Path, keys: dict[str, Path], attested: str, snapshot: Path, tmp_path: Path
) -> None:
    verdict = tmp_path / "verdict.json"
    result = imagekit(
        "verify", f"{ATTESTED}:t", "--key", str(keys["ours.pub"]), "--json", str(verdict),
        cwd=project,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[0] == f"verified: {attested}"
    assert "passed on 0 GPU(s): no GPU (a CPU run)" in result.stdout
    saved = json.loads(verdict.read_text())
    pred = saved["verdicts"][0]
    assert saved["image"] == attested and pred["verdict"] == "passed"
    assert [c["name"] for c in pred["checks"]] == ["stack", "amp"]
    assert pred["torch"] == "2.13.0+cpu"
    kept = "sha256:" + hashlib.sha256(snapshot.read_bytes()).hexdigest()
    assert pred["host_snapshot"]["digest"] == kept  # the snapshot kept with --snapshot
    # cosign itself verifies it, by the predicate type
    cosign = tool(
        "cosign", "verify-attestation", "--key", str(keys["ours.pub"]), "--type", PREDICATE_TYPE,
        "--insecure-ignore-tlog=true", f"{ATTESTED}:t",
    )  # fmt: skip
    assert cosign.returncode == 0, cosign.stderr


def test_another_key_or_gpu_model_is_refused(
    project: Path, keys: dict[str, Path], attested: str
) -> None:
    other = imagekit("verify", attested, "--key", str(keys["other.pub"]), cwd=project)
    assert other.returncode == 1 and "no valid self-check attestation" in other.stderr
    h100 = imagekit(
        "verify", attested, "--key", str(keys["ours.pub"]), "--gpu-model", "NVIDIA H100 80GB HBM3",
        cwd=project,
    )  # fmt: skip
    assert h100.returncode == 1 and "none of a passing run on NVIDIA H100" in h100.stderr


def test_a_failed_run_is_not_attested(project: Path, keys: dict[str, Path], attested: str) -> None:
    # --require gpu on a CPU host: the run fails, and nothing new is signed
    before = _attestations(attested)
    result = imagekit(
        "test", attested, "--checks", "stack", "--require", "gpu", "--attest",
        str(keys["other"]), cwd=project, env={"COSIGN_PASSWORD": ""},
    )  # fmt: skip
    assert result.returncode == 8 and "attested:" not in result.stdout
    assert _attestations(attested) == before
    other = imagekit("verify", attested, "--key", str(keys["other.pub"]), cwd=project)
    assert other.returncode == 1


def test_a_moved_tag_is_refused(project: Path, keys: dict[str, Path], attested: str) -> None:
    # a tag of its own on the attested image (`:t` stays for the other tests, in any order)
    moving = f"{ATTESTED}:moving"
    docker("tag", f"{ATTESTED}:t", moving)
    docker("push", moving)
    before = imagekit("verify", moving, "--key", str(keys["ours.pub"]), cwd=project)
    assert before.returncode == 0, before.stderr  # the same digest: attested
    docker("tag", "debian:bookworm-slim", moving)
    docker("push", moving)
    moved = imagekit("verify", moving, "--key", str(keys["ours.pub"]), cwd=project)
    assert moved.returncode == 1 and "no valid self-check attestation" in moved.stderr
    # the attested digest itself still verifies
    still = imagekit("verify", attested, "--key", str(keys["ours.pub"]), cwd=project)
    assert still.returncode == 0, still.stderr


def test_without_cosign_attest_is_a_clear_usage_error(project: Path) -> None:
    result = imagekit(
        "test", f"{ATTESTED}:t", "--attest", "cosign.key", cwd=project,
        env={"IMAGEKIT_COSIGN": "/nonexistent/cosign"},
    )  # fmt: skip
    assert result.returncode == 2 and "apt-get install cosign" in result.stderr
    assert "Traceback" not in result.stderr


def _attestations(image: str) -> list[str]:
    found = json.loads(tool("oras", "discover", "--plain-http", "--format", "json", image).stdout)
    return sorted(r["digest"] for r in found["referrers"] if "cyclonedx" not in str(r))
