"""Cells as data for people and CI: a table, JSON, a GitHub Actions matrix, a bake file."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from imagekit import paths
from imagekit.errors import UsageError
from imagekit.matrix.cells import Cell
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
        "platforms": list(cell.platforms),
        "labels": dict(cell.labels),
        "env": dict(cell.env),
        "origin": cell.origin,
    }


def cells_json(cells: Sequence[Cell]) -> list[dict[str, Any]]:
    return [cell_json(c) for c in cells]


# GitHub Actions runs at most 256 jobs from one matrix and refuses a workflow with more.
GITHUB_MATRIX_LIMIT = 256


def github_matrix(cells: Sequence[Cell], gpu_runner: str = "gpu") -> dict[str, Any]:
    """`strategy.matrix` value: one entry per cell, with runner hints."""
    if len(cells) > GITHUB_MATRIX_LIMIT:
        lines = sorted({c.cuda for c in cells})
        raise UsageError(
            f"{len(cells)} cells: GitHub Actions refuses a matrix of more than "
            f"{GITHUB_MATRIX_LIMIT} jobs. Select fewer per workflow run, e.g. one CUDA line "
            f"at a time (--cuda {lines[0]}; the matrix has {', '.join(lines)}), or split "
            "envs/ into several matrix files and workflows"
        )
    include = []
    for cell in cells:
        include.append(
            {
                "id": cell.id,
                "cuda": cell.cuda,
                "torch": cell.torch,
                "python": cell.python,
                "flavor": cell.flavor,
                "tag": cell.tags[0],
                "tags": ",".join(cell.tags),
                "dockerfile": f"dockerfiles/{cell.id}/Dockerfile",
                # nvidia bases and CUDA wheels need room: large runners build them.
                "runner": "ubuntu-latest",
                "gpu_runner": gpu_runner if cell.cuda != "cpu" else "ubuntu-latest",
                "requires_gpu": cell.cuda != "cpu",
                "cache": f"{cell.repository}:buildcache-{cell.id}",
                "platforms": ",".join(cell.platforms),
                # an arm64 image built on an x86-64 runner runs its steps under QEMU
                "emulated": any(p != "linux/amd64" for p in cell.platforms),
            }
        )
    return {"include": include}


def _group_name(cell: Cell) -> str:
    return "cpu" if cell.cuda == "cpu" else "cuda-" + cell.cuda.replace(".", "-")


def bake(cells: Sequence[Cell]) -> dict[str, Any]:
    """A docker-bake.json: a target per cell, a group per CUDA version, registry cache."""
    targets: dict[str, Any] = {}
    groups: dict[str, list[str]] = {}
    for cell in cells:
        name = cell.id.replace(".", "_")  # bake target names: letters, digits, _ and -
        cache_ref = f"{cell.repository}:buildcache-{cell.id}"
        context = paths.context_dir(paths.WORK, cell.id)
        targets[name] = {
            "context": context.as_posix(),
            # buildx resolves it against the context: computed, not a fixed ../../..
            "dockerfile": paths.relative(
                paths.committed_dockerfile(paths.DOCKERFILES, cell.id), context
            ),
            "target": "runtime",
            "tags": list(cell.tags),
            "labels": dict(cell.labels),
            "cache-from": [f"type=registry,ref={cache_ref}"],
            "cache-to": [f"type=registry,ref={cache_ref},mode=max"],
            "platforms": list(cell.platforms),
        }
        groups.setdefault(_group_name(cell), []).append(name)
    group = {"default": {"targets": sorted(targets)}}
    group.update({g: {"targets": t} for g, t in sorted(groups.items())})
    return {"group": group, "target": targets}
