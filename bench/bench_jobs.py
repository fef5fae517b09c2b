"""Parallel builds: two cells built one after the other vs at the same time.

`imagekit build --jobs 2` runs one `docker build` per cell, two at a time, against the same
BuildKit and the same cache mounts. The local wheelhouse yields one distinct CPU cell, so
this bench builds that cell in two projects (two repositories): (a) one after the other,
(b) at the same time, each with --no-cache (the installer caches stay warm, as on a CI
runner with a persistent cache). Before pip's cache mount became `sharing=private`, the
second build's torch install waited for the first one's to release the locked cache.

Usage: python -m bench.bench_jobs [--repeat 2]
Prints a table and writes bench/results/jobs.json. Removes the images it builds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from devkit.realengine import (
    build_args,
    docker,
    make_project,
    marked_ca_bundle,
    require_engine,
)

ROOT = Path(__file__).resolve().parent.parent

REPOS = ("imagekit-bench-jobs-a", "imagekit-bench-jobs-b")


def start(root: Path) -> subprocess.Popen[str]:
    args = build_args(marked_ca_bundle(root), "--no-cache", "--progress", "quiet")
    return subprocess.Popen(
        [sys.executable, "-m", "imagekit", *args],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def finish(proc: subprocess.Popen[str]) -> None:
    _, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(err[-2000:])


def one_after_the_other(roots: list[Path]) -> float:
    started = time.perf_counter()
    for root in roots:
        finish(start(root))
    return time.perf_counter() - started


def at_the_same_time(roots: list[Path]) -> float:
    started = time.perf_counter()
    for proc in [start(root) for root in roots]:
        finish(proc)
    return time.perf_counter() - started


def cleanup() -> None:
    refs = docker("images", "--format", "{{.Repository}}:{{.Tag}}").stdout.split()
    for ref in refs:
        if any(repo in ref for repo in REPOS):
            docker("rmi", ref, check=False)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    require_engine()
    serial, parallel = [], []
    with tempfile.TemporaryDirectory() as tmp:
        roots = [make_project(Path(tmp) / repo, repository=repo) for repo in REPOS]
        finish(start(roots[0]))  # warm the installer caches once
        for _ in range(args.repeat):
            serial.append(one_after_the_other(roots))
            cleanup()
            parallel.append(at_the_same_time(roots))
            cleanup()
    s, p = statistics.median(serial), statistics.median(parallel)
    print(f"{'two cells, --no-cache':<34}{'median s':>10}{'runs':>20}")
    print(f"{'one after the other (--jobs 1)':<34}{s:>10.1f}{[round(x) for x in serial]!s:>20}")
    print(f"{'at the same time (--jobs 2)':<34}{p:>10.1f}{[round(x) for x in parallel]!s:>20}")
    print(f"{'speed-up':<34}{s / p:>9.2f}x")
    out = ROOT / "bench" / "results" / "jobs.json"
    out.write_text(
        json.dumps(
            {
                "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} CPUs",
                "serial_seconds": serial,
                "parallel_seconds": parallel,
                "speedup": round(s / p, 2),
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
