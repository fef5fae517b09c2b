"""Cells as data for people and CI: a table, JSON, a GitHub Actions matrix, a bake file."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from imagekit import paths
from imagekit.errors import UsageError
from imagekit.matrix.cells import Cell, stack_of
from imagekit.platforms import AMD64, ARM64
from imagekit.text_table import render_table


def matrix_table(cells: Sequence[Cell]) -> list[str]:
    header = ("CELL", "CUDA", "TORCH", "PYTHON", "OS", "FLAVOR", "FEATURES", "PROFILE")
    rows = [
        (c.id, c.cuda, c.torch, c.python, c.os, c.flavor, ",".join(c.features) or "-", c.profile)
        for c in cells
    ]
    return [*render_table(header, rows), f"{len(cells)} cell{'s' if len(cells) != 1 else ''}"]


def cell_json(cell: Cell) -> dict[str, Any]:
    return {
        "id": cell.id,
        "cuda": cell.cuda,
        "torch": cell.torch,
        "python": cell.python,
        "os": cell.os,
        "flavor": cell.flavor,
        "variant": cell.variant,
        "installer": cell.installer,
        "features": list(cell.features),
        "profile": cell.profile,
        "tags": list(cell.tags),
        "base_image": cell.runtime_image,
        "builder_image": cell.builder_image,
        "dockerfile": f"dockerfiles/{cell.id}/Dockerfile",
        "size_budget": cell.size_budget,
        "min_driver": cell.min_driver,
        "archs": list(cell.archs),
        # each platform's torch wheel has its own GPU archs (aarch64's are fewer)
        "archs_by_platform": {p: list(cell.archs_on(p)) for p in cell.platforms},
        "platforms": list(cell.platforms),
        "labels": dict(cell.labels),
        "env": dict(cell.env),
        "origin": cell.origin,
    }


def cells_json(cells: Sequence[Cell]) -> list[dict[str, Any]]:
    return [cell_json(c) for c in cells]


# GitHub Actions runs at most 256 jobs from one matrix and refuses a workflow with more.
GITHUB_MATRIX_LIMIT = 256

# GitHub's hosted x86-64 runner: it builds amd64, and arm64 too (under QEMU) where no arm64
# runner is named. nvidia bases and CUDA wheels need room: the workflow frees its disk first.
X86_RUNNER = "ubuntu-latest"


def github_matrix(
    cells: Sequence[Cell], gpu_runner: str = "gpu", arm64_runner: str = ""
) -> dict[str, Any]:
    """`strategy.matrix` of the self-test (and merge) jobs: one entry per cell, with runner
    hints. `arm64_runner` is the runs-on label of a native arm64 runner; "" builds arm64
    under QEMU on the x86-64 runner."""
    _check_limit(len(cells), "cells", cells)
    return {"include": [_cell_entry(cell, gpu_runner, arm64_runner) for cell in cells]}


def github_builds(
    cells: Sequence[Cell], gpu_runner: str = "gpu", arm64_runner: str = ""
) -> dict[str, Any]:
    """`strategy.matrix` of the build jobs: a cell built on one runner is one job (all its
    platforms, arm64 under QEMU); a cell split over native runners is a job per platform."""
    jobs = []
    for cell in cells:
        entry = _cell_entry(cell, gpu_runner, arm64_runner)
        jobs += _platform_jobs(cell, entry) if entry["split"] else [_whole_job(entry)]
    _check_limit(len(jobs), "build jobs (one per platform of a cell split over runners)", cells)
    return {"include": jobs}


def github_merges(
    cells: Sequence[Cell], gpu_runner: str = "gpu", arm64_runner: str = ""
) -> dict[str, Any]:
    """`strategy.matrix` of the merge jobs: the cells whose platforms were built on runners
    of their own, each to be joined into one index. Empty without a native arm64 runner."""
    entries = github_matrix(cells, gpu_runner, arm64_runner)["include"]
    return {"include": [entry for entry in entries if entry["split"]]}


def _check_limit(jobs: int, what: str, cells: Sequence[Cell]) -> None:
    if jobs <= GITHUB_MATRIX_LIMIT:
        return
    lines = sorted({c.cuda for c in cells})
    raise UsageError(
        f"{jobs} {what}: GitHub Actions refuses a matrix of more than "
        f"{GITHUB_MATRIX_LIMIT} jobs. Select fewer per workflow run, e.g. one CUDA line "
        f"at a time (--cuda {lines[0]}; the matrix has {', '.join(lines)}), or split "
        "envs/ into several matrix files and workflows"
    )


def platform_runners(cell: Cell, arm64_runner: str = "") -> dict[str, str]:
    """The runner that builds each of the cell's platforms."""
    return {p: arm64_runner if p == ARM64 and arm64_runner else X86_RUNNER for p in cell.platforms}


def _cell_entry(cell: Cell, gpu_runner: str, arm64_runner: str) -> dict[str, Any]:
    runners = platform_runners(cell, arm64_runner)
    # several platforms on runners of their own: a build job each, then one merge
    split = len(set(runners.values())) > 1
    return {
        "id": cell.id,
        "cuda": cell.cuda,
        "torch": cell.torch,
        "python": cell.python,
        "flavor": cell.flavor,
        "tag": cell.tags[0],
        "tags": ",".join(cell.tags),
        "dockerfile": f"dockerfiles/{cell.id}/Dockerfile",
        # the runner of the whole cell's build: its one platform's, else the x86-64 one
        # (which merges a split cell's index)
        "runner": next(iter(runners.values())) if len(runners) == 1 else X86_RUNNER,
        "gpu_runner": gpu_runner if cell.cuda != "cpu" else "ubuntu-latest",
        "requires_gpu": cell.cuda != "cpu",
        "cache": f"{cell.repository}:buildcache-{stack_of(cell)}",
        "platforms": ",".join(cell.platforms),
        # an arm64 image built on an x86-64 runner runs its steps under QEMU
        "emulated": any(p != AMD64 and r == X86_RUNNER for p, r in runners.items()),
        "platform_runners": runners,
        "split": split,
    }


def _whole_job(entry: dict[str, Any]) -> dict[str, Any]:
    """Every platform of the cell on one runner, pushed as one index (or one image)."""
    return {**entry, "job": entry["id"], "suffix": ""}


def _platform_jobs(cell: Cell, entry: dict[str, Any]) -> list[dict[str, Any]]:
    """One job per platform on its own runner, each pushing a candidate of its own platform
    (`<tag>-candidate-<run>-arm64`) whose digest the merge job joins into the index."""
    jobs = []
    for platform, runner in entry["platform_runners"].items():
        arch = platform.rpartition("/")[2]
        jobs.append(
            {
                **entry,
                "runner": runner,
                "platforms": platform,
                "archs": list(cell.archs_on(platform)),
                "emulated": False,
                # a cache per platform: two jobs exporting mode=max to one ref would each
                # overwrite the other's layers
                "cache": f"{entry['cache']}-{arch}",
                "job": f"{cell.id}-{arch}",
                "suffix": f"-{arch}",
            }
        )
    return jobs


def _group_name(cell: Cell) -> str:
    return "cpu" if cell.cuda == "cpu" else "cuda-" + cell.cuda.replace(".", "-")


def same_on_every_platform(cell: Cell) -> dict[str, str]:
    """The cell's labels less those its arm64 image carries other values of: bake sets a
    target's labels on every platform it builds, over the Dockerfile's own per-platform
    LABEL (the arm64 image's io.imagekit.archs would read amd64's list)."""
    differ = {name for name, _ in cell.arm64_labels}
    return {name: value for name, value in cell.labels if name not in differ}


def bake(cells: Sequence[Cell]) -> dict[str, Any]:
    """A docker-bake.json: a target per cell, a group per CUDA version, registry cache."""
    targets: dict[str, Any] = {}
    groups: dict[str, list[str]] = {}
    for cell in cells:
        name = cell.id.replace(".", "_")  # bake target names: letters, digits, _ and -
        cache_ref = f"{cell.repository}:buildcache-{stack_of(cell)}"
        context = paths.context_dir(paths.WORK, cell.id)
        targets[name] = {
            "context": context.as_posix(),
            # buildx resolves it against the context: computed, not a fixed ../../..
            "dockerfile": paths.relative(
                paths.committed_dockerfile(paths.DOCKERFILES, cell.id), context
            ),
            "target": "runtime",
            "tags": list(cell.tags),
            "labels": same_on_every_platform(cell),
            "cache-from": [f"type=registry,ref={cache_ref}"],
            "cache-to": [f"type=registry,ref={cache_ref},mode=max"],
            "platforms": list(cell.platforms),
        }
        groups.setdefault(_group_name(cell), []).append(name)
    group = {"default": {"targets": sorted(targets)}}
    group.update({g: {"targets": t} for g, t in sorted(groups.items())})
    return {"group": group, "target": targets}
