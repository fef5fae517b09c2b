"""Build benchmarks on a real engine (run .ci/setup-host.sh first). Prints a table and
writes bench/results/build.json; docs/benchmarks.md records the figures.

a. warm rebuild after a source-only change: imagekit's Dockerfile vs a naive single-stage
   one for the same packages (`COPY . .` first, then `pip install --no-cache-dir`)
b. rebuild after adding one dependency, with vs without the installer's cache mount,
   for pip and uv, and two user layers: wheels only (installed straight into the runtime
   stage), and wheels plus one sdist with a C extension (annoy, built with build_apt in the
   packages stage, copied as a delta). The index is (1) this machine's PyPI proxy, then
   (2) a local mirror with PyPI's cache headers behind a link of each --link-mbit (0:
   unlimited loopback)
c. runtime image size vs the single-stage image of the same content

Each (b) rebuild leaves about 1.6 GB in BuildKit's cache, so (b) prunes that cache to its
newest 12 GB after each row and removes the images it built.

Usage: python -m bench.bench_build [--wheelhouse /opt/wheels] [--only a|b] [--link-mbit 0 100]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from devkit.pypi_mirror import Mirror
from imagekit.builder import context
from imagekit.builder.inputs import find_ca_bundle
from imagekit.builder.log import StepLog
from imagekit.engine.discover import Builder
from imagekit.engine.docker import DockerEngine
from imagekit.engine.interface import BuildRequest
from imagekit.locks.pinned import load_cells
from imagekit.matrix import compat
from imagekit.render.dockerfile import render

ROOT = Path(__file__).resolve().parent.parent

WORK = ROOT / ".imagekit" / "bench"
BASE_DEPS = ["scipy", "pandas", "scikit-learn", "matplotlib", "sympy"]
NEW_DEP = "rich"
MIRROR_PORT = 38411
PARTIAL = ROOT / "bench" / "results" / "add-dependency.partial.json"


@dataclass(frozen=True)
class Layer:
    """The user's pip packages before one is added, and the OS packages they build with."""

    name: str
    pip: tuple[str, ...]
    build_apt: tuple[str, ...] = ()


LAYERS = (
    Layer("wheels", tuple(BASE_DEPS)),
    # annoy ships only an sdist with a C++ extension: the cache mount keeps the wheel built
    Layer("wheels+sdist", (*BASE_DEPS, "annoy"), ("build-essential", "python3-dev")),
)
NAIVE = """FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv \\
    ca-certificates && rm -rf /var/lib/apt/lists/*
COPY . /app
RUN --mount=type=secret,id=ca export PIP_CERT=/run/secrets/ca \\
    && python3 -m venv /opt/venv \\
    && /opt/venv/bin/pip install --no-cache-dir --find-links /app/wheelhouse {packages}
WORKDIR /app
"""


def matrix(installer: str, pip: list[str], build_apt: tuple[str, ...]) -> str:
    return (
        f"registry: localhost\nrepository: imagekit-bench\ndefaults:\n  installer: {installer}\n"
        f"  pip: {json.dumps(pip)}\n  features: [onnx]\n  source: ../app\n"
        f"  build_apt: {json.dumps(list(build_apt))}\n"
        'matrix:\n  - {cuda: cpu, torch: "2.13.0", python: "3.11", os: debian12, flavor: slim}\n'
    )


def cell_for(installer: str, pip: list[str], build_apt: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    envs = WORK / f"envs-{installer}"
    envs.mkdir(parents=True, exist_ok=True)
    (envs / "m.yaml").write_text(matrix(installer, pip, build_apt))
    (cell,) = load_cells([envs])
    return cell


@dataclass(frozen=True)
class Index:
    """Where the installers fetch from: this machine's proxy, or a local mirror."""

    name: str
    secret: Path | None = None  # a file holding the mirror's URL; None = PyPI via the proxy


@dataclass(frozen=True)
class Timing:
    total_s: float
    install_s: float  # the rebuilt step that installs your pip packages, alone
    rebuilt: dict[str, float]  # each step BuildKit ran (not cached) that took 0.5 s or more


class ExportLog:
    """The time of BuildKit's `exporting to image` vertex, which StepLog (Dockerfile steps
    only) leaves out: a fixed cost per rebuilt layer that no installer cache can save."""

    def __init__(self) -> None:
        self.vertex = ""
        self.seconds = 0.0

    def feed(self, line: str) -> None:
        if line.endswith(" exporting to image"):
            self.vertex = line.split()[0]
        elif self.vertex and line.startswith(f"{self.vertex} DONE "):
            self.seconds = float(line.split()[-1].rstrip("s"))


class Bench:
    def __init__(self, wheelhouse: Path) -> None:
        self.engine = DockerEngine()
        self.wheelhouse = wheelhouse
        self.ca = find_ca_bundle(None)[0]
        (WORK / "app").mkdir(parents=True, exist_ok=True)
        (WORK / "app" / "train.py").write_text("print('v0')\n")

    def build(
        self, name: str, dockerfile_text: str, ctx: Path, index: Index = Index("proxy")
    ) -> tuple[Timing, str]:
        dockerfile = WORK / "dockerfiles" / name / "Dockerfile"
        dockerfile.parent.mkdir(parents=True, exist_ok=True)
        dockerfile.write_text(dockerfile_text)
        secrets = [("ca", self.ca)] if self.ca else []
        if index.secret:
            secrets.append(("index", index.secret))
        request = BuildRequest(
            context=ctx,
            dockerfile=dockerfile,
            target="",
            build_args=(("TORCH_INDEX_URL", ""),),
            secrets=tuple(secrets),
            network="host" if index.secret else "",  # the mirror listens on 127.0.0.1
        )
        log, export = StepLog(), ExportLog()
        start = time.perf_counter()
        result = self.engine.build(request, lambda line: (log.feed(line), export.feed(line)))
        total = time.perf_counter() - start
        install = sum(s.seconds for s in log.steps.values() if f"'{NEW_DEP};" in s.name)
        rebuilt = {s.name[:90]: s.seconds for s in log.steps.values() if not s.cached}
        rebuilt["exporting to image"] = export.seconds
        slow = {name: seconds for name, seconds in rebuilt.items() if seconds >= 0.5}
        return Timing(total, install, slow), result.image_id

    def imagekit_build(
        self, cell, cache_mounts: bool = True, index: Index = Index("proxy")
    ) -> tuple[Timing, str]:  # type: ignore[no-untyped-def]
        name = f"{cell.installer}-{cell.pip_stage}-{cache_mounts}"
        ctx = context.stage(cell, WORK / "ctx" / name, self.wheelhouse)
        return self.build(name, render(cell, cache_mounts=cache_mounts), ctx, index)

    def naive_build(self, packages: list[str]) -> tuple[Timing, str]:
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
    imagekit, image = b.imagekit_build(cell_for("pip", BASE_DEPS))
    naive, naive_image = b.naive_build(packages)
    sizes = {"imagekit": b.engine.inspect(image).size, "naive": b.engine.inspect(naive_image).size}  # type: ignore[union-attr]
    return {
        "imagekit_s": imagekit.total_s,
        "naive_s": naive.total_s,
        "noop_s": noop.total_s,
        "speedup": naive.total_s / imagekit.total_s,
        "imagekit_bytes": sizes["imagekit"],
        "naive_bytes": sizes["naive"],
        "size_ratio": sizes["naive"] / sizes["imagekit"],
    }


def add_dependency(
    b: Bench, layer: Layer, installer: str, cache_mounts: bool, index: Index
) -> Timing:
    """Add one dependency to the user layer: the second of two such rebuilds, so the cache
    mount (when there is one) already holds what the first fetched and built."""
    timing = Timing(0.0, 0.0, {})
    for _ in range(2):
        # A textually unique marker (always true) makes the layer run again each time.
        new = f'{NEW_DEP}; platform_system != "nonce-{uuid.uuid4().hex[:8]}"'
        cell = cell_for(installer, [*layer.pip, new], layer.build_apt)
        timing, image = b.imagekit_build(cell, cache_mounts, index)
        b.engine.client.images.remove(image, force=True)  # each one is 1.6 GB of disk
    return timing


def prune_build_cache(builder: Builder) -> None:
    """Each rebuild leaves about 1.6 GB in BuildKit's cache: keep the newest 12 GB."""
    cmd = [builder.cli, "builder", "prune", "-f", "--keep-storage", "12gb"]
    subprocess.run(cmd, env=builder.environment(), capture_output=True, check=False)


def dependency_rows(b: Bench, index: Index) -> dict[str, dict[str, float]]:
    rows = {}
    for layer, installer in [(lay, i) for lay in LAYERS for i in ("pip", "uv")]:
        without = add_dependency(b, layer, installer, False, index)
        with_mount = add_dependency(b, layer, installer, True, index)
        key = f"{layer.name} {installer}"
        rows[key] = {
            "no_mount_s": without.total_s,
            "mount_s": with_mount.total_s,
            "ratio": without.total_s / with_mount.total_s,
            "install_no_mount_s": without.install_s,
            "install_mount_s": with_mount.install_s,
            "install_ratio": without.install_s / max(with_mount.install_s, 0.1),
            "rebuilt_no_mount": without.rebuilt,
            "rebuilt_mount": with_mount.rebuilt,
        }
        print(f"  {index.name} {key}: {rows[key]}", flush=True)
        prune_build_cache(b.engine.builder)
    return rows


def dependency_scenarios(b: Bench, link_mbit: list[float]) -> dict[str, object]:
    results: dict[str, object] = {"proxy": dependency_rows(b, Index("this machine's proxy"))}
    save_partial(results)
    for mbit in link_mbit:
        rate = mbit * 1e6 / 8 if mbit else None
        # A fixed port: pip's and uv's caches are keyed by URL, so they must stay the same.
        with Mirror(WORK / "mirror", b.ca, bytes_per_second=rate, port=MIRROR_PORT) as mirror:
            secret = WORK / "index-url"
            secret.write_text(mirror.index_url())
            name = f"mirror, {mbit:g} Mbit/s" if mbit else "mirror, unlimited"
            results[name] = dependency_rows(b, Index(name, secret))
            save_partial(results)
    return results


def save_partial(results: dict[str, object]) -> None:
    """A long run keeps what it measured even if a later row fails (a full disk, Ctrl-C)."""
    PARTIAL.write_text(json.dumps(results, indent=2) + "\n")


def print_tables(a: dict[str, float] | None, deps: dict[str, object] | None) -> None:
    if a:
        print(f"{'a. source-only rebuild':<40}{'seconds':>9}")
        print(f"{'  naive single-stage':<40}{a['naive_s']:>9.1f}")
        print(f"{'  imagekit':<40}{a['imagekit_s']:>9.1f}  {a['speedup']:.1f}x faster")
        print(f"{'  no-op rebuild, imagekit':<40}{a['noop_s']:>9.1f}")
        print(
            f"c. runtime size: imagekit {a['imagekit_bytes'] / 1e9:.2f} GB, single-stage "
            f"{a['naive_bytes'] / 1e9:.2f} GB ({a['size_ratio']:.2f}x)"
        )
    if deps:
        print("b. add one dependency (whole rebuild s; install step s in brackets)")
        print(f"{'index':<26}{'layer, installer':<18}{'no mount':>16}{'cache mount':>16}  ratio")
        for name, rows in deps.items():
            for row, r in rows.items():  # type: ignore[attr-defined]
                print(
                    f"{name:<26}{row:<18}"
                    f"{r['no_mount_s']:>7.1f} ({r['install_no_mount_s']:>5.1f})"
                    f"{r['mount_s']:>8.1f} ({r['install_mount_s']:>5.1f})"
                    f"  {r['ratio']:.1f}x ({r['install_ratio']:.1f}x)"
                )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--wheelhouse", type=Path, default=Path("/opt/wheels"))
    parser.add_argument("--only", choices=["a", "b"], default=None, help="a includes c")
    parser.add_argument("--link-mbit", type=float, nargs="*", default=[0, 100])
    args = parser.parse_args()
    b = Bench(args.wheelhouse)
    print(b.engine.describe())
    out = ROOT / "bench" / "results" / "build.json"
    previous = json.loads(out.read_text()) if out.exists() else {}
    a = source_change(b) if args.only in (None, "a") else previous.get("source_change")
    deps = (
        dependency_scenarios(b, args.link_mbit)
        if args.only in (None, "b")
        else previous.get("add_dependency")
    )
    print_tables(a, deps)
    out.write_text(
        json.dumps(
            {
                "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "machine": f"{os.cpu_count()} CPUs, {platform.machine()}, {b.engine.describe()}",
                "source_change": a,
                "add_dependency": deps,
            },
            indent=2,
        )
        + "\n"
    )
    PARTIAL.unlink(missing_ok=True)  # build.json holds all of it now
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
