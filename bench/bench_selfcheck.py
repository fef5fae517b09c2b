"""The self-check's own cost: how long `imagekit test` takes on the CPU test cell in a real
container, and what torch.compile support (g++ and the Python headers in the runtime) adds
to the image. Targets (issue 13): CPU self-check in a container <= 20 s; GPU <= 60 s (the
GPU figure comes from docs/selfcheck-gpu.md, measured on a lent H100).

Usage: python bench/bench_selfcheck.py [--repeat 3] [--skip-size]
Needs the engine and registry of .ci/setup-host.sh. Prints a table and writes
bench/results/selfcheck.json. Builds the CPU test cell twice (compile on, compile off) in a
scratch project and removes what it built.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.realengine import (  # noqa: E402  (the tests' helpers drive the real engine)
    REGISTRY,
    build_args,
    docker,
    imagekit,
    make_project,
    marked_ca_bundle,
    require_engine,
)

TAGS = {
    True: f"{REGISTRY}/imagekit-bench-sc:on",
    False: f"{REGISTRY}/imagekit-bench-sc:off",
}


def build(root: Path, compile_support: bool) -> str:
    matrix = root / "envs" / "cpu.yaml"
    text = matrix.read_text().replace(
        "  size_budget: 3GB", "  size_budget: 3GB\n  compile: " + str(compile_support).lower()
    )
    text = text.replace(
        'tag: "{torch}-{variant}-py{python}-{os}-{flavor}"',
        f'tag: "{TAGS[compile_support].rsplit(":", 1)[1]}"',
    )
    text = text.replace("repository: imagekit-test", "repository: imagekit-bench-sc")
    matrix.write_text(text.replace('extra_tags: ["{id}-latest"]', "extra_tags: []"))
    result = imagekit(*build_args(marked_ca_bundle(root)), cwd=root)
    if result.returncode != 0:
        raise SystemExit(result.stdout[-2000:] + result.stderr[-2000:])
    return TAGS[compile_support]


def image_size(tag: str) -> int:
    return int(docker("image", "inspect", "--format", "{{.Size}}", tag).stdout.strip())


def selfcheck_once(tag: str, root: Path) -> tuple[float, dict[str, float]]:
    out = root / "sc.json"
    start = time.perf_counter()
    result = imagekit("test", tag, "--json", str(out), cwd=root)
    total = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(result.stdout[-3000:] + result.stderr[-3000:])
    checks = json.loads(out.read_text())["checks"]
    return total, {c["name"]: c["seconds"] for c in checks}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-size", action="store_true", help="no compile: false build")
    args = parser.parse_args()
    require_engine()
    with tempfile.TemporaryDirectory() as tmp:
        on = build(make_project(Path(tmp) / "on"), True)
        off = None if args.skip_size else build(make_project(Path(tmp) / "off"), False)
        runs = [selfcheck_once(on, Path(tmp) / "on") for _ in range(args.repeat)]
        sizes = {"compile_on": image_size(on)} | ({"compile_off": image_size(off)} if off else {})
        for tag in filter(None, (on, off)):
            docker("rmi", tag, check=False)
    totals = [r[0] for r in runs]
    per_check = {n: statistics.median(r[1][n] for r in runs) for n in runs[0][1]}
    print(f"{'what':<34}{'median':>10}{'min':>10}{'max':>10}")
    print(
        f"{'imagekit test (CPU, container), s':<34}{statistics.median(totals):>10.1f}"
        f"{min(totals):>10.1f}{max(totals):>10.1f}"
    )
    for name, seconds in per_check.items():
        print(f"  {name:<32}{seconds:>10.1f}")
    for name, size in sizes.items():
        print(f"{'image size, ' + name:<34}{size / 1e6:>9.0f}M")
    if "compile_off" in sizes:
        cost = (sizes["compile_on"] - sizes["compile_off"]) / 1e6
        print(f"{'compile support costs':<34}{cost:>9.0f}M")
    results = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} CPUs",
        "selfcheck_seconds": totals,
        "per_check_median_seconds": per_check,
        "image_bytes": sizes,
        "target_cpu_seconds": 20,
    }
    out = ROOT / "bench" / "results" / "selfcheck.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
