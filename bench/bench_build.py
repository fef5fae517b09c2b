"""Build benchmarks on a real engine (run .ci/setup-host.sh first). Prints a table and
writes bench/results/build.json; docs/benchmarks.md records the figures.

a. warm rebuild after a source-only change: imagekit's Dockerfile vs a naive single-stage
   one for the same packages (`COPY . .` first, then `pip install --no-cache-dir`)
b. rebuild after adding one dependency, with vs without the installer's cache mount,
   for pip and uv
c. runtime image size vs the single-stage image of the same content

Usage: python bench/bench_build.py [--wheelhouse /opt/wheels]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

from imagekit import compat, context
from imagekit.catalog import load_cells
from imagekit.engine.base import BuildRequest
from imagekit.engine.docker import DockerEngine
from imagekit.inputs import find_ca_bundle
from imagekit.render import render

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / ".imagekit" / "bench"
BASE_DEPS = ["scipy", "pandas", "scikit-learn", "matplotlib", "sympy"]
NEW_DEP = "rich"
NAIVE = """FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv \\
    ca-certificates && rm -rf /var/lib/apt/lists/*
COPY . /app
RUN --mount=type=secret,id=ca export PIP_CERT=/run/secrets/ca \\
    && python3 -m venv /opt/venv \\
    && /opt/venv/bin/pip install --no-cache-dir --find-links /app/wheelhouse {packages}
WORKDIR /app
"""


def matrix(installer: str, pip: list[str]) -> str:
    return (
        f"registry: localhost\nrepository: imagekit-bench\ndefaults:\n  installer: {installer}\n"
        f"  pip: {json.dumps(pip)}\n  features: [onnx]\n  source: ../app\n"
        'matrix:\n  - {cuda: cpu, torch: "2.13.0", python: "3.11", os: debian12, flavor: slim}\n'
    )


def cell_for(installer: str, pip: list[str]):  # type: ignore[no-untyped-def]
    envs = WORK / f"envs-{installer}"
    envs.mkdir(parents=True, exist_ok=True)
    (envs / "m.yaml").write_text(matrix(installer, pip))
    (cell,) = load_cells([envs])
    return cell


class Bench:
    def __init__(self, wheelhouse: Path) -> None:
        self.engine = DockerEngine()
        self.wheelhouse = wheelhouse
        self.ca = find_ca_bundle(None)[0]
        (WORK / "app").mkdir(parents=True, exist_ok=True)
        (WORK / "app" / "train.py").write_text("print('v0')\n")

    def build(self, name: str, dockerfile_text: str, ctx: Path) -> tuple[float, str]:
        dockerfile = WORK / "dockerfiles" / name / "Dockerfile"
        dockerfile.parent.mkdir(parents=True, exist_ok=True)
        dockerfile.write_text(dockerfile_text)
        secrets = (("ca", self.ca),) if self.ca else ()
        request = BuildRequest(
            context=ctx,
            dockerfile=dockerfile,
            target="",
            build_args=(("TORCH_INDEX_URL", ""),),
            secrets=secrets,
        )
        start = time.perf_counter()
        result = self.engine.build(request, lambda line: None)
        return time.perf_counter() - start, result.image_id

    def imagekit_build(self, cell, cache_mounts: bool = True) -> tuple[float, str]:  # type: ignore[no-untyped-def]
        ctx = context.stage(
            cell, WORK / "ctx" / f"{cell.installer}-{cache_mounts}", self.wheelhouse
        )
        return self.build(
            f"{cell.installer}-{cache_mounts}", render(cell, cache_mounts=cache_mounts), ctx
        )

    def naive_build(self, packages: list[str]) -> tuple[float, str]:
        ctx = WORK / "naive"
        if not ctx.exists():
            ctx.mkdir(parents=True)
            shutil.copytree(self.wheelhouse, ctx / "wheelhouse", copy_function=os.link)
        shutil.copy2(WORK / "app" / "train.py", ctx / "train.py")
        return self.build("naive", NAIVE.format(packages=" ".join(f"'{p}'" for p in packages)), ctx)

    def touch_source(self) -> None:
        (WORK / "app" / "train.py").write_text(f"print('{uuid.uuid4().hex}')\n")


def source_change(b: Bench) -> dict[str, float]:
    cell = cell_for("pip", BASE_DEPS)
    packages = ["torch==2.13.0", *compat.load().features["onnx"].pip["cpu"], *BASE_DEPS]
    b.imagekit_build(cell)
    b.naive_build(packages)
    noop, _ = b.imagekit_build(cell)
    b.touch_source()
    imagekit_s, image = b.imagekit_build(cell_for("pip", BASE_DEPS))
    naive_s, naive_image = b.naive_build(packages)
    sizes = {"imagekit": b.engine.inspect(image).size, "naive": b.engine.inspect(naive_image).size}  # type: ignore[union-attr]
    return {
        "imagekit_s": imagekit_s,
        "naive_s": naive_s,
        "noop_s": noop,
        "speedup": naive_s / imagekit_s,
        "imagekit_bytes": sizes["imagekit"],
        "naive_bytes": sizes["naive"],
        "size_ratio": sizes["naive"] / sizes["imagekit"],
    }


def add_dependency(b: Bench, installer: str, cache_mounts: bool) -> float:
    b.imagekit_build(cell_for(installer, BASE_DEPS), cache_mounts)  # warm: layers and cache
    # A textually unique marker (always true) forces this layer to run even when an
    # earlier benchmark run left it in BuildKit's cache.
    new = f'{NEW_DEP}; platform_system != "nonce-{uuid.uuid4().hex[:8]}"'
    seconds, _ = b.imagekit_build(cell_for(installer, [*BASE_DEPS, new]), cache_mounts)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--wheelhouse", type=Path, default=Path("/opt/wheels"))
    args = parser.parse_args()
    b = Bench(args.wheelhouse)
    print(b.engine.describe())
    a = source_change(b)
    deps = {
        f"{i}-{'cache' if c else 'nocache'}": add_dependency(b, i, c)
        for i in ("pip", "uv")
        for c in (True, False)
    }
    rows = [
        ("a. source-only rebuild, naive single-stage", a["naive_s"], ""),
        ("a. source-only rebuild, imagekit", a["imagekit_s"], f"{a['speedup']:.1f}x faster"),
        ("a. no-op rebuild, imagekit", a["noop_s"], ""),
        ("b. add a dependency, pip, no cache mount", deps["pip-nocache"], ""),
        (
            "b. add a dependency, pip, cache mount",
            deps["pip-cache"],
            f"{deps['pip-nocache'] / deps['pip-cache']:.1f}x",
        ),
        ("b. add a dependency, uv, no cache mount", deps["uv-nocache"], ""),
        (
            "b. add a dependency, uv, cache mount",
            deps["uv-cache"],
            f"{deps['uv-nocache'] / deps['uv-cache']:.1f}x; "
            f"uv vs pip {deps['pip-cache'] / deps['uv-cache']:.1f}x",
        ),
    ]
    print(f"{'measure':<46}{'seconds':>9}  ratio")
    for name, seconds, ratio in rows:
        print(f"{name:<46}{seconds:>9.1f}  {ratio}")
    print(
        f"c. runtime size: imagekit {a['imagekit_bytes'] / 1e9:.2f} GB, single-stage "
        f"{a['naive_bytes'] / 1e9:.2f} GB ({a['size_ratio']:.2f}x)"
    )
    out = ROOT / "bench" / "results" / "build.json"
    out.write_text(
        json.dumps(
            {
                "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, {b.engine.describe()}",
                "source_change": a,
                "add_dependency_s": deps,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
