"""Cold builds of the README cell against the floor (issue 21's bench, landed first).

In one process and one run: (a) `imagekit build` of the README cell on an empty BuildKit
(`docker builder prune -af`: no layer cache, no installer cache), (b) the same cold build
with a push to the local registry, and (c) the floor: a bare `uv pip install` of the same
resolved wheel set (read from the built image) into a fresh venv on the host with an empty
uv cache. Prints the ratios (goals: build <= 2x the floor, build + push <= 3x) and the
build's slowest steps, and writes bench/results/cold-<installer>.json.

Usage: python bench/bench_cold.py [--installer pip|uv]   (default: as the README cell builds)
Needs the engine and registry of .ci/setup-host.sh and network to PyPI. It prunes BuildKit's
whole cache (the next builds on this machine start cold) and removes what it built.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.realengine import docker, imagekit, require_engine  # noqa: E402

CA = "/etc/ssl/certs/ca-certificates.crt"
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


def prune() -> None:
    subprocess.run(["/usr/bin/docker", "builder", "prune", "-af"], capture_output=True, check=False)


def cold_build(root: Path, push: bool) -> tuple[float, dict]:  # type: ignore[type-arg]
    prune()
    docker("rmi", f"{EMPTY}/{REPO}:{CELL}", check=False)
    args = ["build", "--envs", "envs", "--ca-bundle", CA, "--progress", "plain"]
    started = time.perf_counter()
    result = imagekit(*args, *(["--push"] if push else []), cwd=root, timeout=3600)
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(result.stdout[-3000:] + result.stderr[-2000:])
    return seconds, json.loads((root / "reports" / CELL / "build.json").read_text())


def floor(tag: str, work: Path) -> float:
    """A bare uv install of the image's own wheel set into a fresh venv, empty cache."""
    frozen = docker("run", "--rm", "--entrypoint", "/opt/venv/bin/python", tag, "-c", PROBE)
    wanted = [line for line in frozen.stdout.splitlines() if line and not line.startswith("pip==")]
    (work / "requirements.txt").write_text("\n".join(wanted) + "\n")
    tools = work / "tools"
    subprocess.run([sys.executable, "-m", "venv", str(tools)], check=True)
    subprocess.run([str(tools / "bin" / "pip"), "install", "-q", "uv"], check=True)
    subprocess.run(["python3.11", "-m", "venv", "--without-pip", str(work / "venv")], check=True)
    env = {**os.environ, "UV_CACHE_DIR": str(work / "uv-cache"), "SSL_CERT_FILE": CA}
    started = time.perf_counter()
    subprocess.run(
        [str(tools / "bin" / "uv"), "pip", "install", "-q", "--python", str(work / "venv"),
         "-r", str(work / "requirements.txt")],
        env=env,
        check=True,
    )  # fmt: skip
    return time.perf_counter() - started


def slowest(report: dict, count: int = 5) -> list[tuple[str, float]]:  # type: ignore[type-arg]
    steps = sorted(report["steps"], key=lambda s: -float(s["seconds"]))
    return [(str(s["step"])[:70], float(s["seconds"])) for s in steps[:count]]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--installer", choices=["pip", "uv"], default="pip")
    parser.add_argument("--no-push", action="store_true", help="skip the build + push run")
    args = parser.parse_args()
    require_engine()
    with tempfile.TemporaryDirectory() as tmp, empty_registry(Path(tmp)):
        root = Path(tmp) / "project"
        (root / "envs").mkdir(parents=True)
        (root / "envs" / "cold.yaml").write_text(MATRIX.replace("INSTALLER", args.installer))
        build_s, report = cold_build(root, push=False)
        steps_s = sum(float(s["seconds"]) for s in report["steps"])
        push_s = None if args.no_push else cold_build(root, push=True)[0]
        floor_s = floor(f"{EMPTY}/{REPO}:{CELL}", Path(tmp))
        docker("rmi", f"{EMPTY}/{REPO}:{CELL}", check=False)
    prune()
    rows = [
        ("cold build", build_s, build_s / floor_s, 2.0),
        *([("cold build + push", push_s, push_s / floor_s, 3.0)] if push_s else []),
        ("bare uv install (the floor)", floor_s, 1.0, None),
    ]
    print(f"README cell ({CELL}), installer {args.installer}")
    print(f"{'what':<32}{'seconds':>9}{'x floor':>9}{'goal':>7}")
    for name, seconds, ratio, goal in rows:
        print(f"{name:<32}{seconds:>9.1f}{ratio:>8.1f}x{(f'{goal:.0f}x' if goal else ''):>7}")
    print(f"build steps {steps_s:.0f} s; after the last step (export) {build_s - steps_s:.0f} s")
    for name, seconds in slowest(report):
        print(f"  {seconds:>6.1f} s  {name}")
    out = ROOT / "bench" / "results" / f"cold-{args.installer}.json"
    out.write_text(
        json.dumps(
            {
                "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} CPUs",
                "installer": args.installer,
                "cold_build_s": build_s,
                "cold_build_push_s": push_s,
                "bare_uv_install_s": floor_s,
                "build_steps_s": steps_s,
                "slowest_steps": slowest(report),
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
