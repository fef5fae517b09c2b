"""The self-check's own cost: how long `imagekit test` takes on the CPU test cell in a real
container, and what torch.compile support (g++ and the Python headers in the runtime) adds
to the image. Targets (issue 13): CPU self-check in a container <= 20 s; GPU <= 60 s (the
GPU figure comes from docs/selfcheck-gpu.md, measured on a lent H100).

Usage: python -m bench.bench_selfcheck [--repeat 3] [--skip-size]
Needs the engine and registry of .ci/setup-host.sh. Prints a table and writes
bench/results/selfcheck.json. Builds the CPU test cell twice (compile on, compile off) in a
scratch project and removes what it built.

Native (no engine): python -m bench.bench_selfcheck --native PYTHON [--cpu-kind avx2]
runs `python -m imagekit.selfcheck` of this checkout with PYTHON (a venv with torch, onnx,
onnxscript, onnxruntime), each run cold as in a new container: a fresh TMPDIR holds
inductor's cache and its precompiled header. `--cpu-kind avx2` emulates an x86 host without
AVX-512 or VNNI: ATen and inductor at AVX2 (ATEN_CPU_CAPABILITY) and, as root, a
/proc/cpuinfo without those flags bind-mounted in a private mount namespace (the int8
scheme's reading). onnxruntime and torch's cpuid still see the real CPU. Writes
bench/results/selfcheck-native-<kind>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from devkit.realengine import (
    REGISTRY,
    build_args,
    docker,
    imagekit,
    make_project,
    marked_ca_bundle,
    require_engine,
)

ROOT = Path(__file__).resolve().parent.parent

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


def native_once(python: str, kind: str, tmp: Path) -> tuple[float, dict[str, float]]:
    """One native self-check of this checkout, cold: its own TMPDIR (inductor's cache and
    precompiled headers live under it)."""
    out, run_tmp = tmp / "sc.json", Path(tempfile.mkdtemp(dir=tmp))
    env = os.environ | {"TMPDIR": str(run_tmp), "PYTHONPATH": str(ROOT)}
    cmd = [python, "-m", "imagekit.selfcheck", "--json", str(out)]
    if kind == "avx2":
        fake = tmp / "cpuinfo"
        text = Path("/proc/cpuinfo").read_text()
        fake.write_text(re.sub(r" (avx512\w*|avx_vnni\w*)", "", text))
        env["ATEN_CPU_CAPABILITY"] = "avx2"
        mount = f'mount --bind {fake} /proc/cpuinfo && exec "$@"'
        cmd = ["unshare", "-m", "sh", "-c", mount, "sh", *cmd]
    start = time.perf_counter()
    result = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    total = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(result.stdout[-3000:] + result.stderr[-3000:])
    checks = json.loads(out.read_text())["checks"]
    return total, {c["name"]: c["seconds"] for c in checks if c["seconds"]}


def _row(name: str, values: list[float]) -> str:
    return f"{name:<34}{statistics.median(values):>10.1f}{min(values):>10.1f}{max(values):>10.1f}"


def native(python: str, kind: str, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        runs = [native_once(python, kind, Path(tmp)) for _ in range(repeat)]
    print(f"{'native self-check (' + kind + '), s':<34}{'median':>10}{'min':>10}{'max':>10}")
    print(_row("whole", [r[0] for r in runs]))
    for name in runs[0][1]:
        print(_row(f"  {name}", [r[1].get(name, 0.0) for r in runs]))
    out = ROOT / "bench" / "results" / f"selfcheck-native-{kind}.json"
    record = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} CPUs",
        "cpu_kind": kind,
        "selfcheck_seconds": [r[0] for r in runs],
        "per_check_seconds": {n: [r[1].get(n, 0.0) for r in runs] for n in runs[0][1]},
        "target_cpu_seconds": 30,
    }
    out.write_text(json.dumps(record, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-size", action="store_true", help="no compile: false build")
    parser.add_argument("--native", metavar="PYTHON", help="no engine: run it natively")
    parser.add_argument("--cpu-kind", choices=("native", "avx2"), default="native")
    args = parser.parse_args()
    if args.native:
        native(args.native, args.cpu_kind, args.repeat)
        return
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
