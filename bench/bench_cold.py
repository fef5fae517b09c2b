"""Cold builds of the README cell against the floor (issue 21's bench, landed first).

In one process and one run: (a) `imagekit build` of the README cell on an empty BuildKit
(`docker builder prune -af`: no layer cache, no installer cache), (b) the same cold build
with a push to the local registry, and (c) the floor: a bare `uv pip install` of the same
resolved wheel set (read from the built image) into a fresh venv on the host with an empty
uv cache. With --rounds N, (a) and (c) run N times in turn, and the build's ratio is the
median of each round's build over that round's floor (the floor alone moved from 17 s to
24 s between runs here). Prints the ratios (goals: build <= 2x the floor, build + push <=
3x) and where a cold build's time goes along its critical path (the phases below), and
writes bench/results/cold-<installer>-docker<engine>.json (the engine's major version, or
"containerd" for the containerd image store). Also prints the export's own steps as BuildKit
logs them (exporting layers, unpacking, ...): where the export's time goes on each store.

Usage: python -m bench.bench_cold [--installer pip|uv] [--rounds N] [--no-push]
Needs the engine and registry of .ci/setup-host.sh and network to PyPI. It prunes BuildKit's
whole cache (the next builds on this machine start cold) and removes what it built.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from devkit.realengine import HOST_CA, docker, prune_build_cache, require_engine

ROOT = Path(__file__).resolve().parent.parent

REPO = "imagekit-bench-cold"
EMPTY = "127.0.0.1:5001"  # a registry of the bench's own (empty_registry)
CELL = "cu126-torch2.7.1-py3.11-debian12-slim"
MATRIX = f"""
registry: {EMPTY}
repository: {REPO}
tag: "{{id}}"
defaults: {{torchvision: true, pip: ["numpy<3", "tqdm>=4.66"], size_budget: 14GB}}
matrix:
  - {{cuda: "12.6", torch: "2.7.1", python: "3.11", os: debian12, flavor: slim,
     installer: INSTALLER, features: [onnx]}}
"""
PROBE = (
    "import importlib.metadata as m; "
    "print('\\n'.join(sorted(f\"{d.metadata['Name']}=={d.version}\" for d in m.distributions())))"
)


@contextlib.contextmanager
def empty_registry(folder: Path) -> Iterator[str]:
    """A registry of its own, empty: a push must upload every layer (the shared one on
    :5000 may already hold blobs of the same digests, which reproducible layers make likely)."""
    config = folder / "registry.yml"
    config.write_text(
        "version: 0.1\nstorage:\n  filesystem:\n"
        f"    rootdirectory: {folder / 'data'}\nhttp:\n  addr: {EMPTY}\n"
    )
    server = subprocess.Popen(
        ["docker-registry", "serve", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(2)
        yield EMPTY
    finally:
        server.terminate()
        server.wait(timeout=30)


def cold_build(
    root: Path, push: bool, cache: Path | None = None
) -> tuple[float, dict, list[tuple[float, str]]]:  # type: ignore[type-arg]
    """One cold build: its seconds, build.json, and its log lines with the second each came.
    Cold as on a fresh machine: no build cache, and imagekit's own cache (the layer scans a
    push's platform proof keeps) in `cache`, else in a new empty folder."""
    prune_build_cache()
    docker("rmi", f"{EMPTY}/{REPO}:{CELL}", check=False)
    with tempfile.TemporaryDirectory(prefix="ik-cache-") as fresh:
        return _timed_build(root, push, cache or Path(fresh))


def _timed_build(
    root: Path, push: bool, cache: Path
) -> tuple[float, dict, list[tuple[float, str]]]:  # type: ignore[type-arg]
    args = ["build", "--envs", "envs", "--ca-bundle", HOST_CA, "--progress", "plain"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "IMAGEKIT_CACHE_DIR": str(cache)}
    command = [sys.executable, "-m", "imagekit", *args, *(["--push"] if push else [])]
    started = time.perf_counter()
    lines: list[tuple[float, str]] = []
    with subprocess.Popen(
        command, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append((time.perf_counter() - started, line.rstrip("\n")))
    seconds = time.perf_counter() - started
    if process.returncode != 0:
        raise SystemExit("\n".join(text for _, text in lines[-60:]))
    # reports are keyed by cell id, <repository>-<stack>; the image's tag is the stack ({id})
    report = json.loads((root / "reports" / f"{REPO}-{CELL}" / "build.json").read_text())
    return seconds, report, lines


_VERTEX = re.compile(r"#(\d+) (\[[^\]]+\] .*|exporting to image)$")
_DONE = re.compile(r"#(\d+) DONE ([\d.]+)s$")


def phases(lines: list[tuple[float, str]], total: float) -> dict[str, float]:
    """A cold build's critical path: the stages before the venv's first package group (os-base's
    apt beside the builder's resolve), each group step, the steps after them, and the
    engine's export of the image after the last step."""
    names: dict[str, str] = {}
    begun: dict[str, float] = {}
    done: dict[str, float] = {}
    for at, line in lines:
        text = line.split("] ", 1)[-1] if line.startswith("[") else line
        if match := _VERTEX.search(text):
            names.setdefault(match.group(1), match.group(2))
            begun.setdefault(match.group(1), at)
        elif match := _DONE.search(text):
            done[match.group(1)] = at
    groups = {}
    for group in ("cuda", "torch", "features"):
        # the cuda group: cuda.txt, or its parts cuda-1.txt, cuda-2.txt, ... (one layer each)
        vertices = [v for v, n in names.items() if re.search(rf"groups/{group}(-\d+)?\.txt", n)]
        if vertices and all(v in done for v in vertices):
            groups[group] = (min(begun[v] for v in vertices), max(done[v] for v in vertices))
    if not groups:  # venv_layers: single
        return {"build steps": total}
    first, last = min(b for b, _ in groups.values()), max(e for _, e in groups.values())
    # the export's own line comes only when it ends: it starts when the last step is done
    steps_end = max(at for vertex, at in done.items() if names.get(vertex, "").startswith("["))
    result = {"before the groups (apt beside resolve)": first}
    result |= {f"group: {group}": end - begin for group, (begin, end) in groups.items()}
    result["steps after the groups"] = steps_end - last
    result["export of the image"] = total - steps_end
    return result


_EXPORT_STEP = re.compile(
    r"#\d+ (exporting layers|exporting manifest|exporting config|writing image|"
    r"unpacking to|naming to)\S*(?: \S+)*? ([\d.]+)s done$"
)


_EXPORT_LINE = re.compile(r"#\d+ (exporting|unpacking|naming|writing image)")


def export_steps(lines: list[tuple[float, str]]) -> dict[str, float]:
    """The export's own steps as BuildKit logs them (`#N exporting layers 36.2s done`,
    `#N unpacking to ... 12.0s done`): where the export's time goes on each store."""
    found: dict[str, float] = {}
    for _, line in lines:
        text = line.split("] ", 1)[-1] if line.startswith("[") else line
        if match := _EXPORT_STEP.search(text):
            found[match.group(1)] = found.get(match.group(1), 0.0) + float(match.group(2))
    return found


def engine_name() -> str:
    """The engine as a reader of the results needs it: server version and image store."""
    version = docker("version", "--format", "{{.Server.Version}}").stdout.strip()
    status = docker("info", "--format", "{{json .DriverStatus}}").stdout
    store = "containerd image store" if "io.containerd.snapshotter" in status else "classic store"
    return f"Docker {version}, {store}"


def floor(tag: str, work: Path) -> float:
    """A bare uv install of the image's own wheel set into a fresh venv, empty cache; the
    venv and cache go again (6 GB each round)."""
    work.mkdir()
    frozen = docker("run", "--rm", "--entrypoint", "/opt/venv/bin/python", tag, "-c", PROBE)
    wanted = [line for line in frozen.stdout.splitlines() if line and not line.startswith("pip==")]
    (work / "requirements.txt").write_text("\n".join(wanted) + "\n")
    tools = work / "tools"
    subprocess.run([sys.executable, "-m", "venv", str(tools)], check=True)
    subprocess.run([str(tools / "bin" / "pip"), "install", "-q", "uv"], check=True)
    subprocess.run(["python3.11", "-m", "venv", "--without-pip", str(work / "venv")], check=True)
    env = {**os.environ, "UV_CACHE_DIR": str(work / "uv-cache"), "SSL_CERT_FILE": HOST_CA}
    started = time.perf_counter()
    subprocess.run(
        [str(tools / "bin" / "uv"), "pip", "install", "-q", "--python", str(work / "venv"),
         "-r", str(work / "requirements.txt")],
        env=env,
        check=True,
    )  # fmt: skip
    seconds = time.perf_counter() - started
    shutil.rmtree(work)
    return seconds


def ready_engine() -> None:
    """The engine up, with the base: not part of a cold build, made once before any timing."""
    require_engine()
    if docker("image", "inspect", "debian:bookworm-slim", check=False).returncode != 0:
        subprocess.run([sys.executable, "-m", "imagekit", "base", "bootstrap", "--suite",
                        "bookworm"], check=True)  # fmt: skip


@dataclass
class Runs:
    """What the rounds measured: each round's cold build and floor, and the build + push."""

    builds: list[float] = field(default_factory=list)
    floors: list[float] = field(default_factory=list)
    timelines: list[dict[str, float]] = field(default_factory=list)
    exports: list[dict[str, float]] = field(default_factory=list)
    export_log: list[str] = field(default_factory=list)  # the last round's export lines
    push_s: float | None = None

    def build_ratio(self) -> float:
        """The median of each round's build over that round's floor."""
        return statistics.median([b / f for b, f in zip(self.builds, self.floors, strict=True)])

    def floor_s(self) -> float:
        return statistics.median(self.floors)

    def critical_path(self) -> dict[str, float]:
        return {
            name: statistics.median([t[name] for t in self.timelines]) for name in self.timelines[0]
        }

    def export_medians(self) -> dict[str, float]:
        return {
            name: statistics.median([e.get(name, 0.0) for e in self.exports])
            for name in self.exports[0]
        }


def run_rounds(installer: str, rounds: int, push: bool) -> Runs:
    """The cold build and the floor, `rounds` times in turn, then the build + push; BuildKit's
    cache pruned after them."""
    runs = Runs()
    with tempfile.TemporaryDirectory() as tmp, empty_registry(Path(tmp)):
        root = Path(tmp) / "project"
        (root / "envs").mkdir(parents=True)
        (root / "envs" / "cold.yaml").write_text(MATRIX.replace("INSTALLER", installer))
        for round_ in range(rounds):
            build_s, _, lines = cold_build(root, push=False)
            runs.builds.append(build_s)
            runs.timelines.append(phases(lines, build_s))
            runs.exports.append(export_steps(lines))
            runs.export_log = [text for _, text in lines if _EXPORT_LINE.search(text)]
            runs.floors.append(floor(f"{EMPTY}/{REPO}:{CELL}", Path(tmp) / f"floor{round_}"))
        runs.push_s = cold_build(root, push=True)[0] if push else None
        docker("rmi", f"{EMPTY}/{REPO}:{CELL}", check=False)
    prune_build_cache()
    return runs


def print_runs(args: argparse.Namespace, runs: Runs, engine: str) -> None:
    """The ratios against the goals, the cold build's critical path and the export's steps."""
    push_s, floor_s = runs.push_s, runs.floor_s()
    rows = [
        ("cold build", statistics.median(runs.builds), runs.build_ratio(), 2.0),
        *([("cold build + push", push_s, push_s / floor_s, 3.0)] if push_s else []),
        ("bare uv install (the floor)", floor_s, 1.0, None),
    ]
    print(f"README cell ({CELL}), installer {args.installer}, {args.rounds} round(s), medians")
    print(f"engine: {engine}")
    print(f"{'what':<32}{'seconds':>9}{'x floor':>9}{'goal':>7}")
    for name, seconds, ratio, goal in rows:
        print(f"{name:<32}{seconds:>9.1f}{ratio:>8.1f}x{(f'{goal:.0f}x' if goal else ''):>7}")
    print("the cold build's critical path (median seconds):")
    for name, seconds in runs.critical_path().items():
        print(f"  {seconds:>6.1f} s  {name}")
    print("the export's own steps, as BuildKit logs them (median seconds):")
    for name, seconds in runs.export_medians().items():
        print(f"  {seconds:>6.1f} s  {name}")


def write_runs(args: argparse.Namespace, runs: Runs, engine: str) -> Path:
    """bench/results/cold-<installer>-docker<engine>.json."""
    store = "containerd" if "containerd" in engine else engine.split()[1].split(".")[0]
    out = ROOT / "bench" / "results" / f"cold-{args.installer}-docker{store}.json"
    push_s, floor_s = runs.push_s, runs.floor_s()
    out.write_text(
        json.dumps(
            {
                "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} CPUs",
                "engine": engine,
                "installer": args.installer,
                "rounds": args.rounds,
                "cold_build_s": runs.builds,
                "bare_uv_install_s": runs.floors,
                "cold_build_over_floor_median": runs.build_ratio(),
                "cold_build_push_s": push_s,
                "cold_build_push_over_floor": push_s / floor_s if push_s else None,
                "critical_path_s": runs.critical_path(),
                "export_steps_s": runs.export_medians(),
                "export_log": runs.export_log,
            },
            indent=2,
        )
        + "\n"
    )
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--installer", choices=["pip", "uv"], default="pip")
    parser.add_argument("--rounds", type=int, default=1, help="cold build and floor, N times")
    parser.add_argument("--no-push", action="store_true", help="skip the build + push run")
    args = parser.parse_args()
    ready_engine()
    runs = run_rounds(args.installer, args.rounds, push=not args.no_push)
    engine = engine_name()
    print_runs(args, runs, engine)
    out = write_runs(args, runs, engine)
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
