"""The venv in layers vs one layer, in one run with the local registry (issue 17, item 3).

For each layout (`venv_layers: single`, what imagekit did before, and `split`) it builds and
pushes a 2-cell matrix from an empty BuildKit cache: the README cell (CUDA 12.6, torch 2.7.1,
Python 3.11, Debian 12) and its twin on Python 3.13 / Debian 13. Then:
(a) registry bytes of the two cells (unique compressed blobs of their manifests) as a ratio of
    one image: goal <= 1.5x;
(b) a cold `docker pull` of the README cell from the local registry after removing it and its
    layers: goal split >= 1.5x faster than single;
(c) the README cell's cold build time: split must not be more than 5% slower.
It also checks that the two split cells share the CUDA-libraries layer.

Usage: python -m bench.bench_layers     (needs .ci/setup-host.sh's engine and registry, network
to PyPI and the Debian mirror; about 20 minutes; prunes BuildKit's cache and what it built).
Writes bench/results/layers.json.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from devkit.realengine import (
    HOST_CA,
    REGISTRY,
    docker,
    imagekit,
    layer_sizes,
    prune_build_cache,
    require_engine,
)

ROOT = Path(__file__).resolve().parent.parent

CELLS = ("cu126-torch2.7.1-py3.11-debian12-slim", "cu126-torch2.7.1-py3.13-debian13-slim")
MATRIX = """
registry: {registry}
repository: {repo}
tag: "{{id}}"
defaults: {{torchvision: true, pip: ["numpy<3", "tqdm>=4.66"], size_budget: 14GB,
           features: [onnx], venv_layers: {layout}}}
matrix:
  - {{cuda: "12.6", torch: "2.7.1", python: "3.11", os: debian12, flavor: slim}}
  - {{cuda: "12.6", torch: "2.7.1", python: "3.13", os: debian13, flavor: slim}}
"""


def blobs(repo: str, tags: tuple[str, ...]) -> dict[str, int]:
    found: dict[str, int] = {}
    for tag in tags:
        found |= layer_sizes(repo, tag)
    return found


def remove_local(repo: str) -> None:
    """Every local image of the repository, by ID (all its tags), and its layers."""
    ids = docker("images", "-q", f"{REGISTRY}/{repo}", check=False).stdout.split()
    if ids:
        docker("rmi", "-f", *sorted(set(ids)), check=False)
    docker("image", "prune", "-f", check=False)


def cold_pull(repo: str, tag: str) -> float:
    for layout in ("single", "split"):  # nothing of either may be left to reuse
        remove_local(f"imagekit-bench-layers-{layout}")
    started = time.perf_counter()
    docker("pull", f"{REGISTRY}/{repo}:{tag}", timeout=1800)
    return time.perf_counter() - started


def twin_pulls() -> dict[str, float]:
    """The README cell pulled onto a node that has its Python 3.13 twin already."""
    found = {}
    for layout in ("single", "split"):
        repo = f"imagekit-bench-layers-{layout}"
        cold_pull(repo, CELLS[1])
        started = time.perf_counter()
        docker("pull", f"{REGISTRY}/{repo}:{CELLS[0]}", timeout=1800)
        found[layout] = time.perf_counter() - started
        remove_local(repo)
    return found


def pulls(rounds: int = 2) -> dict[str, list[float]]:
    """Cold pulls of the README cell, the two layouts alternating."""
    found: dict[str, list[float]] = {"single": [], "split": []}
    for _ in range(rounds):
        for layout in found:
            found[layout].append(cold_pull(f"imagekit-bench-layers-{layout}", CELLS[0]))
    for layout in found:
        remove_local(f"imagekit-bench-layers-{layout}")
    return found


def run_layout(layout: str, tmp: Path) -> dict[str, object]:
    repo = f"imagekit-bench-layers-{layout}"
    root = tmp / layout
    (root / "envs").mkdir(parents=True)
    (root / "envs" / "m.yaml").write_text(
        MATRIX.format(registry=REGISTRY, repo=repo, layout=layout)
    )
    prune_build_cache()
    times = {}
    for cell in CELLS:
        times[cell] = build_cell(root, cell)
    one = blobs(repo, CELLS[:1])
    both = blobs(repo, CELLS)
    shared = sorted(set(blobs(repo, CELLS[:1])) & set(blobs(repo, CELLS[1:])))
    result = {
        "build_s": times,
        "registry_bytes_one": sum(one.values()),
        "registry_bytes_two": sum(both.values()),
        "layers_one": sorted(one.values(), reverse=True),
        "shared_layers": {d: one[d] for d in shared},
    }
    remove_local(repo)
    return result


def build_cell(root: Path, cell: str) -> float:
    args = ["build", "--envs", "envs", "--ca-bundle", HOST_CA, "--progress", "plain", "--push"]
    python, os_name = cell.split("-")[2][2:], cell.split("-")[3]
    started = time.perf_counter()
    result = imagekit(
        *args, "--python", python, "--os", os_name, "--bootstrap-base", cwd=root, timeout=3600
    )
    if result.returncode != 0:
        raise SystemExit(result.stdout[-3000:] + result.stderr[-2000:])
    return time.perf_counter() - started


def main() -> None:
    require_engine()
    out = ROOT / "bench" / "results" / "layers.json"
    if (
        "--pull-only" in sys.argv or "--twin-only" in sys.argv
    ):  # the registry still holds both layouts' images
        results = {k: v for k, v in json.loads(out.read_text()).items() if k in ("single", "split")}
    else:
        results = {}
        with tempfile.TemporaryDirectory() as tmp:
            for layout in ("single", "split"):
                results[layout] = run_layout(layout, Path(tmp))
                print(layout, json.dumps(results[layout], indent=1)[:2000], flush=True)
        prune_build_cache()
    if "--twin-only" in sys.argv:
        for layout, seconds in twin_pulls().items():
            results[layout]["twin_present_pull_s"] = seconds
    else:
        for layout, seconds in pulls().items():
            results[layout]["cold_pull_s"] = sorted(seconds)[len(seconds) // 2]
            results[layout]["cold_pulls_s"] = seconds
    single, split = results["single"], results["split"]
    gb = 1e9
    rows = []
    for name, data in (("single", single), ("split", split)):
        ratio = int(data["registry_bytes_two"]) / int(data["registry_bytes_one"])  # type: ignore[call-overload]
        rows.append((name, data, ratio))
    print(
        f"{'layout':<8}{'1 image GB':>11}{'2 cells GB':>11}{'ratio':>7}{'pull s':>8}{'build s':>9}"
    )
    for name, data, ratio in rows:
        build_s = data["build_s"][CELLS[0]]  # type: ignore[index]
        print(
            f"{name:<8}{int(data['registry_bytes_one']) / gb:>11.2f}"  # type: ignore[call-overload]
            f"{int(data['registry_bytes_two']) / gb:>11.2f}{ratio:>6.2f}x"  # type: ignore[call-overload]
            f"{float(data['cold_pull_s']):>8.1f}{build_s:>9.1f}"  # type: ignore[arg-type]
        )
    pull_speedup = float(single["cold_pull_s"]) / float(split["cold_pull_s"])  # type: ignore[arg-type]
    build_ratio = split["build_s"][CELLS[0]] / single["build_s"][CELLS[0]]  # type: ignore[index]
    print(f"(a) registry, 2 cells / 1 image: split {rows[1][2]:.2f}x (goal <= 1.5x),", end=" ")
    print(f"single {rows[0][2]:.2f}x")
    print(f"(b) cold pull: split {pull_speedup:.2f}x faster than single (goal >= 1.5x)")
    if "twin_present_pull_s" in split:
        twin = float(single["twin_present_pull_s"]) / float(split["twin_present_pull_s"])  # type: ignore[arg-type]
        print(f"    with the Python 3.13 twin on the node: split {twin:.2f}x faster")
    print(f"(c) cold build: split / single = {build_ratio:.3f} (goal <= 1.05)")
    print(
        f"shared between the two split cells: {len(split['shared_layers'])} layers, "  # type: ignore[arg-type]
        f"{sum(split['shared_layers'].values()) / gb:.2f} GB"
    )  # type: ignore[union-attr]
    out.write_text(json.dumps({
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} CPUs",
        "cells": CELLS, **results,
        "pull_speedup": pull_speedup, "build_ratio": build_ratio,
    }, indent=2) + "\n")  # fmt: skip
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
