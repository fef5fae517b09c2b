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

Usage: python bench/bench_layers.py     (needs .ci/setup-host.sh's engine and registry, network
to PyPI and the Debian mirror; about 20 minutes; prunes BuildKit's cache and what it built).
Writes bench/results/layers.json.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.realengine import REGISTRY, docker, imagekit, require_engine  # noqa: E402

CA = "/etc/ssl/certs/ca-certificates.crt"
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
MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"


def prune() -> None:
    subprocess.run(["/usr/bin/docker", "builder", "prune", "-af"], capture_output=True, check=False)


def manifest(repo: str, tag: str) -> dict[str, object]:
    request = urllib.request.Request(
        f"http://{REGISTRY}/v2/{repo}/manifests/{tag}", headers={"Accept": MANIFEST}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return dict(json.loads(response.read()))


def blobs(repo: str, tags: tuple[str, ...]) -> dict[str, int]:
    found: dict[str, int] = {}
    for tag in tags:
        for layer in manifest(repo, tag)["layers"]:  # type: ignore[union-attr]
            found[layer["digest"]] = int(layer["size"])
    return found


def cold_pull(ref: str) -> float:
    docker("rmi", "-f", ref, check=False)
    docker("image", "prune", "-f", check=False)
    started = time.perf_counter()
    docker("pull", ref, timeout=1800)
    return time.perf_counter() - started


def run_layout(layout: str, tmp: Path) -> dict[str, object]:
    repo = f"imagekit-bench-layers-{layout}"
    root = tmp / layout
    (root / "envs").mkdir(parents=True)
    (root / "envs" / "m.yaml").write_text(
        MATRIX.format(registry=REGISTRY, repo=repo, layout=layout)
    )
    prune()
    times = {}
    for cell in CELLS:
        times[cell] = build_cell(root, cell)
    one = blobs(repo, CELLS[:1])
    both = blobs(repo, CELLS)
    refs = [f"{REGISTRY}/{repo}:{cell}" for cell in CELLS]
    for ref in refs:
        docker("rmi", "-f", ref, check=False)
    pull_s = cold_pull(refs[0])
    shared = sorted(set(blobs(repo, CELLS[:1])) & set(blobs(repo, CELLS[1:])))
    result = {
        "build_s": times,
        "registry_bytes_one": sum(one.values()),
        "registry_bytes_two": sum(both.values()),
        "layers_one": sorted(one.values(), reverse=True),
        "shared_layers": {d: one[d] for d in shared},
        "cold_pull_s": pull_s,
    }
    docker("rmi", "-f", *refs, check=False)
    return result


def build_cell(root: Path, cell: str) -> float:
    args = ["build", "--envs", "envs", "--ca-bundle", CA, "--progress", "plain", "--push"]
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
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for layout in ("single", "split"):
            results[layout] = run_layout(layout, Path(tmp))
            print(layout, json.dumps(results[layout], indent=1)[:2000], flush=True)
    prune()
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
    print(f"(c) cold build: split / single = {build_ratio:.3f} (goal <= 1.05)")
    print(
        f"shared between the two split cells: {len(split['shared_layers'])} layers, "  # type: ignore[arg-type]
        f"{sum(split['shared_layers'].values()) / gb:.2f} GB"
    )  # type: ignore[union-attr]
    out = ROOT / "bench" / "results" / "layers.json"
    out.write_text(json.dumps({
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} CPUs",
        "cells": CELLS, **results,
        "pull_speedup": pull_speedup, "build_ratio": build_ratio,
    }, indent=2) + "\n")  # fmt: skip
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
