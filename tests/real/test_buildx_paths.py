"""buildx's paths for real, on the engine whose builds BuildKit's image exporter writes (Docker
28 + buildx on the containerd image store): a zstd push read back from the registry, pulled
cold and self-checked; a registry cache (mode=max) that lets an empty builder install nothing;
the images workflow's commands run as written against the local registry; and eStargz refused
where it would crash the daemon, with the daemon still up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from devkit.realengine import (
    DOCKER,
    REGISTRY,
    build_args,
    docker,
    image_manifest_digest,
    imagekit,
    make_project,
    manifest,
    prune_build_cache,
    registry_get,
    require_exporter,
    wheelhouse,
)

from ..test_ci import load_workflow
from .conftest import CELL, cell_of, report

pytestmark = [pytest.mark.docker, pytest.mark.slow]

ZSTD_LAYER = "application/vnd.oci.image.layer.v1.tar+zstd"


def forget(*refs: str) -> None:
    """Remove images from the engine, so the next pull starts cold."""
    docker("rmi", "-f", *refs, check=False)


def build_in(root: Path, project: Path, *more: str) -> dict:  # type: ignore[type-arg]
    """`imagekit build` of the test cell in `root` (the session's CA bundle); its report."""
    result = imagekit(*build_args(project / "ca-marked.pem", *more), cwd=root)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    return report(root)


def test_a_push_without_load_goes_straight_to_the_registry_in_zstd_then_test_pulls_it(
    project: Path, tmp_path: Path
) -> None:
    """`imagekit build --push` (no --load, --compression auto): one BuildKit run exports the
    layers in zstd straight to the registry; the engine's image store gets nothing; the
    report and the SBOM come back from the registry; `imagekit test` pulls the image."""
    require_exporter()
    root = make_project(tmp_path / "p", repository="imagekit-zstd")
    built = build_in(root, project, "--push")
    assert built["push_compression"] == "zstd" and built["push_path"] == "builder"
    assert built["tags"] == [] and len(built["pushed"]) == 2
    local = f"{REGISTRY}/imagekit-zstd:2.13.0-cpu-py3.11-debian12-slim"
    assert docker("image", "inspect", local, check=False).returncode != 0
    pushed = built["pushed"][0]
    digest = pushed.split("@", 1)[1]
    layers = manifest("imagekit-zstd", digest)["layers"]
    assert {layer["mediaType"] for layer in layers} == {ZSTD_LAYER}
    # the report is the registry's: the image manifest's digest and its compressed layers
    assert built["image_id"] == image_manifest_digest("imagekit-zstd", digest)
    assert built["sizes"] == "compressed"
    assert [x["size_bytes"] for x in built["layers"]] == [x["size"] for x in layers]
    assert built["size_bytes"] == sum(x["size"] for x in layers)
    assert any("sbom_writer.py" in x["created_by"] for x in built["layers"])
    # its files, read back from the registry's zstd layers, are x86-64's (issue 49)
    whats = {c["what"] for c in built["content"]}
    assert {"the venv's Python", "torch's native code", "torch's wheel tag"} <= whats
    assert {c["found"] for c in built["content"]} == {"x86_64"}
    assert_scans_kept(pushed, built, layers)
    # the SBOM attached is the one inside the image, read out of its zstd layer
    assert built["sbom"]
    from_registry = imagekit("sbom", pushed, "--from", "registry", cwd=root)
    assert from_registry.returncode == 0, from_registry.stderr
    test = imagekit("test", pushed, "--checks", "stack,amp,ddp", cwd=root, timeout=600)
    assert test.returncode == 0, test.stdout[-3000:] + test.stderr[-2000:]
    assert "is not on this engine: pulling it" in test.stderr
    inside = imagekit("sbom", pushed, "--from", "image", cwd=root)
    assert inside.returncode == 0 and inside.stdout == from_registry.stdout
    forget(pushed)


def assert_scans_kept(pushed: str, built: dict, layers: list[dict]) -> None:  # type: ignore[type-arg]
    """The build kept each pushed layer's scan (engine/scan_cache.py, this test's own cache
    folder): read again with no oras at all, the image proves what the build reported."""
    from imagekit.builder.platform_proof import prove
    from imagekit.engine import image_registry, scan_cache
    from imagekit.engine.interface import Layer

    assert all(scan_cache.scan_path(x["digest"]).is_file() for x in layers)  # type: ignore[union-attr]
    kept = [Layer("", x["size"], digest=x["digest"], media_type=x["mediaType"]) for x in layers]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("IMAGEKIT_ORAS", "/nonexistent/oras")  # a read from the registry fails
        files = image_registry.files(image_registry.by_digest(pushed, built["image_id"]), kept)
    assert prove("linux/amd64", files, "3.11").as_list() == built["content"]


@pytest.mark.empties_cache(what="all")  # after the others, before the CUDA twins (conftest.py)
def test_a_registry_cache_lets_an_empty_builder_install_nothing_again(
    project: Path, tmp_path: Path
) -> None:
    require_exporter()
    root = make_project(tmp_path / "p", repository="imagekit-cached")
    cache = f"type=registry,ref={REGISTRY}/imagekit-cached:buildcache"
    first = build_in(root, project, "--cache-to", f"{cache},mode=max")
    assert manifest("imagekit-cached", "buildcache")["layers"]  # the cache is in the registry
    forget(*first["tags"])
    prune_build_cache()
    again = build_in(root, project, "--cache-from", cache)
    runs = [s for s in again["steps"] if " RUN " in f" {s['step'].split('] ', 1)[-1]}"]
    assert runs and all(step["cached"] for step in runs), [s for s in runs if not s["cached"]]


def workflow_steps() -> dict[str, str]:
    """The images workflow's shell steps, by step id or name."""
    flow = load_workflow("images.yml")
    steps: dict[str, str] = {}
    for job in flow["jobs"].values():
        for step in job["steps"]:
            if "run" in step:
                steps[step.get("id") or step.get("name") or step["run"]] = step["run"]
    return steps


def run_step(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # GitHub runs `run:` with `bash -e {0}`; the workflow's env and the step's come in as
    # the environment, the docker on PATH is the engine's.
    path = f"{Path(DOCKER).parent}:{Path(sys.executable).parent}:{os.environ['PATH']}"
    return subprocess.run(
        ["bash", "-e", "-c", script],
        cwd=cwd,
        env={**os.environ, **env, "PATH": path},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def test_the_images_workflow_commands_run_as_written(project: Path, tmp_path: Path) -> None:
    require_exporter()
    # a repository of this run's own: a tag an earlier run promoted must not read as this one's
    flow = f"imagekit-flow-{uuid.uuid4().hex[:8]}"
    root = make_project(tmp_path / "p", repository=flow)
    steps = workflow_steps()
    outputs = tmp_path / "github-output"
    common = {
        "GITHUB_OUTPUT": str(outputs),
        "IMAGEKIT_GPU_RUNNER": "gpu",
        "PUBLISH": "true",
        "CANDIDATE": "-candidate-1",
        # where the runner's wheels are: the test cell's torch comes from a local wheelhouse
        "IMAGEKIT_WHEELHOUSE": str(wheelhouse()),
        "IMAGEKIT_TORCH_INDEX": "none",
        "PIP_CERT": str(project / "ca-marked.pem"),
    }
    matrix = run_step(steps["matrix"], root, {**common, "CUDA": ""})
    assert matrix.returncode == 0, matrix.stderr
    # GITHUB_OUTPUT: one name=value line per output
    said = dict(line.split("=", 1) for line in outputs.read_text().splitlines() if "=" in line)
    (cell,) = json.loads(said["cells"])["include"]
    (job,) = json.loads(said["builds"])["include"]  # one platform: one build job
    assert cell["id"] == job["id"] == cell_of(flow) and job["suffix"] == ""
    assert "merges" not in said  # nothing to merge, so no merge job
    build = run_step(
        steps["Build (and push a candidate on main)"],
        root,
        {
            **common,
            "CELL": job["id"],
            "CACHE": job["cache"],
            "PLATFORMS": job["platforms"],
            "SUFFIX": job["suffix"],
        },
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-2000:]
    candidate = cell["tag"] + "-candidate-1"
    assert manifest(flow, candidate.rsplit(":", 1)[1])["layers"]
    assert manifest(flow, cell["cache"].rsplit(":", 1)[1])["layers"]
    forget(candidate, *cell["tags"].split(","))
    assert report(root)["sbom"]  # the candidate's SBOM rides beside it
    ours, other = cosign_keys(tmp_path / "ours"), cosign_keys(tmp_path / "other")
    check = run_step(
        steps["Self-check the candidate on this runner's hardware"],
        root,
        {**common, "TAG": cell["tag"], "REQUIRE": "", **ours},
    )
    assert check.returncode == 0, check.stdout[-3000:] + check.stderr[-2000:]
    assert (root / "reports" / "host.json").is_file()
    promote_env = {**common, "TAG": cell["tag"], "TAGS": cell["tags"]}
    step = steps["Promote (only reached when the self-check passed)"]
    # a key that signed nothing here: nothing is promoted
    refused = run_step(step, root, {**promote_env, **other})
    assert refused.returncode == 1, refused.stdout[-2000:] + refused.stderr[-2000:]
    assert "no valid self-check attestation" in refused.stderr
    final = cell["tags"].split(",")
    tags = json.loads(registry_get(f"{flow}/tags/list", accept="*/*"))["tags"]
    assert not {t.rsplit(":", 1)[1] for t in final} & set(tags)
    promote = run_step(step, root, {**promote_env, **ours})
    assert promote.returncode == 0, promote.stdout[-2000:] + promote.stderr[-2000:]
    attested = json.loads((root / "reports" / "verdict.json").read_text())["image"]
    pushed = manifest(flow, candidate.rsplit(":", 1)[1])
    for tag in final:
        assert manifest(flow, tag.rsplit(":", 1)[1])["layers"] == pushed["layers"]
        verified = imagekit("verify", tag, "--key", "env://COSIGN_PUBLIC_KEY", cwd=root, env=ours)
        assert verified.returncode == 0 and f"verified: {attested}" in verified.stdout
    forget(candidate)


def cosign_keys(folder: Path) -> dict[str, str]:
    """A cosign key pair (no password) as the workflow's secrets hold it: the PEM texts."""
    folder.mkdir()
    made = subprocess.run(
        ["cosign", "generate-key-pair"], cwd=folder, capture_output=True, text=True,
        env={**os.environ, "COSIGN_PASSWORD": ""}, timeout=60, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    return {
        "COSIGN_PRIVATE_KEY": (folder / "cosign.key").read_text(),
        "COSIGN_PASSWORD": "",
        "COSIGN_PUBLIC_KEY": (folder / "cosign.pub").read_text(),
    }


def test_estargz_is_refused_where_it_would_crash_the_daemon_and_the_daemon_stays_up(
    project: Path,
) -> None:
    require_exporter()
    go = docker("version", "--format", "{{.Server.GoVersion}}").stdout.strip()
    if not go.startswith("go1.2") or int(go[2:].split(".")[1]) < 27:
        pytest.skip(f"this daemon was built with {go}: eStargz export does not crash it")
    bundle = project / "ca-marked.pem"
    result = imagekit(*build_args(bundle, "--push", "--compression", "estargz"), cwd=project)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "--compression estargz: Docker engine" in result.stderr
    assert f"was built with {go}" in result.stderr and "IMAGEKIT_ALLOW_ESTARGZ=1" in result.stderr
    assert f"[{CELL}] build started" not in result.stdout  # refused before any build
    assert docker("info", "--format", "{{.ServerVersion}}").returncode == 0
