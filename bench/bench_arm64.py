"""arm64 under QEMU on this x86-64 machine (issue 39): what a Grace image costs to make here.

1. `imagekit base bootstrap` of Debian 12 for linux/amd64 and for linux/arm64 (debootstrap,
   its second stage under QEMU for arm64), each timed;
2. the same cell's OS stage (`--target os-base`: apt installs the compiler, Python's headers
   and Python, then the user) built cold for each platform: the same steps, so the ratio is
   QEMU's cost step by step;
3. the whole arm64 CPU cell (torch 2.7.1, PyPI's aarch64 wheel) built cold, and its
   self-check run under QEMU; beside it, the whole amd64 build of the nearest cell this
   machine can build (torch 2.13.0+cpu from the local wheelhouse: the CPU index that serves
   amd64's torch 2.7.1 is not reachable here), for scale, not as a ratio.

4. with --onnx: the same arm64 cell with `features: [onnx]` (onnxruntime's aarch64 wheel)
   built cold and self-checked under QEMU, so the onnx and int8 checks run on Arm's kernels.

Usage: python -m bench.bench_arm64 [--cell-only | --onnx]   (the containerd engine running,
QEMU registered for arm64: `bash .ci/setup-host.sh`; --cell-only: step 3's arm64 build again;
--onnx: step 4 alone, merged into the results).
Writes bench/results/arm64.json; removes what it built and prunes BuildKit's cache before
each cold build.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from devkit.realengine import (
    docker,
    imagekit,
    marked_ca_bundle,
    prune_build_cache,
    require_engine,
    wheelhouse,
)

ROOT = Path(__file__).resolve().parent.parent

BASE = "bench-arm64/debian-{arch}:bookworm"
CELL = """registry: 127.0.0.1:5000
repository: bench-arm64
matrix:
  - {{cuda: cpu, torch: "{torch}", python: "3.11", os: debian12, flavor: slim,
     base: "{base}", platform: [{platform}], features: [{features}]}}
"""


def timed(
    *args: str, cwd: Path, timeout: float = 1800
) -> tuple[float, subprocess.CompletedProcess[str]]:
    started = time.monotonic()
    result = imagekit(*args, cwd=cwd, timeout=timeout)
    return round(time.monotonic() - started, 1), result


def checked(result: subprocess.CompletedProcess[str], what: str) -> None:
    if result.returncode != 0:
        sys.exit(f"{what} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")


def project(root: Path, torch: str, arch: str, features: str = "") -> Path:
    (root / "envs").mkdir(parents=True)
    base = BASE.format(arch=arch)
    (root / "envs" / "cell.yaml").write_text(
        CELL.format(torch=torch, base=base, platform=f"linux/{arch}", features=features)
    )
    return root


def build(root: Path, arch: str, *more: str) -> tuple[float, dict]:  # type: ignore[type-arg]
    prune_build_cache()
    bundle = marked_ca_bundle(root)
    seconds, result = timed(
        "build", "--platform", f"linux/{arch}", "--ca-bundle", str(bundle), "--progress",
        "plain", *more, cwd=root,
    )  # fmt: skip
    checked(result, f"the {arch} build in {root}")
    (cell,) = (root / "reports").iterdir()
    report = json.loads((cell / "build.json").read_text())
    docker("rmi", "-f", *report["tags"], check=False)
    return seconds, report


def steps(report: dict) -> dict[str, float]:  # type: ignore[type-arg]
    """The report's steps that ran (not cached), by their text after the stage marker."""
    return {
        s["step"].split("] ", 1)[-1][:70]: float(s["seconds"])
        for s in report["steps"]
        if not s["cached"] and float(s["seconds"]) >= 0.5
    }


def arm64_base(work: Path) -> None:
    """The arm64 base the cell builds on, made untimed (steps 3 and 4 run alone)."""
    made = imagekit("base", "bootstrap", "--platform", "linux/arm64", "--tag",
                    BASE.format(arch="arm64"), cwd=work, timeout=1800)  # fmt: skip
    checked(made, "bootstrap arm64")


def cell_only() -> None:
    """Step 3's build alone, cold, again (its base made first, untimed); merged into the
    results file: for a figure taken when nothing else ran."""
    out = ROOT / "bench" / "results" / "arm64.json"
    results = json.loads(out.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        arm64_base(Path(tmp))
        arm = project(Path(tmp) / "cell-arm64", "2.7.1", "arm64")
        seconds, report = build(arm, "arm64")
        results["arm64_cell"] = {"seconds": seconds, "size_bytes": report["size_bytes"],
                                 "steps": steps(report), "rerun": True}  # fmt: skip
        docker("rmi", "-f", BASE.format(arch="arm64"), check=False)
    prune_build_cache()
    out.write_text(json.dumps(results, indent=1) + "\n")
    print_table(results)


def onnx_only() -> None:
    """Step 4: the arm64 cell with the onnx feature, cold, then its self-check under QEMU
    (base made first, untimed); merged into the results file."""
    out = ROOT / "bench" / "results" / "arm64.json"
    results = json.loads(out.read_text())
    with tempfile.TemporaryDirectory() as tmp:
        arm64_base(Path(tmp))
        arm = project(Path(tmp) / "cell-arm64-onnx", "2.7.1", "arm64", "onnx")
        seconds, report = build(arm, "arm64")
        results["arm64_onnx_cell"] = {"seconds": seconds, "size_bytes": report["size_bytes"],
                                      "steps": steps(report)}  # fmt: skip
        results["arm64_onnx_selfcheck"] = selfcheck(arm, Path(tmp))
        docker("rmi", "-f", BASE.format(arch="arm64"), check=False)
    prune_build_cache()
    out.write_text(json.dumps(results, indent=1) + "\n")
    print_table(results)


def main() -> None:
    require_engine()
    if sys.argv[1:] == ["--cell-only"]:
        cell_only()
        return
    if sys.argv[1:] == ["--onnx"]:
        onnx_only()
        return
    results: dict[str, object] = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
    }
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        boot = {}
        for arch in ("amd64", "arm64"):
            seconds, result = timed(
                "base", "bootstrap", "--platform", f"linux/{arch}", "--tag",
                BASE.format(arch=arch), cwd=work,
            )  # fmt: skip
            checked(result, f"bootstrap {arch}")
            boot[arch] = seconds
        results["bootstrap_s"] = boot
        os_stage = {}
        for arch in ("amd64", "arm64"):
            root = project(work / f"os-{arch}", "2.7.1", arch)
            seconds, report = build(root, arch, "--target", "os-base")
            os_stage[arch] = {"seconds": seconds, "steps": steps(report)}
        results["os_stage"] = os_stage
        arm = project(work / "cell-arm64", "2.7.1", "arm64")
        seconds, report = build(arm, "arm64")
        results["arm64_cell"] = {"seconds": seconds, "size_bytes": report["size_bytes"],
                                 "steps": steps(report)}  # fmt: skip
        amd = project(work / "cell-amd64", "2.13.0", "amd64")
        seconds, report = build(
            amd, "amd64", "--wheelhouse", str(wheelhouse()), "--torch-index", "none"
        )
        results["amd64_nearest_cell"] = {"torch": "2.13.0+cpu (wheelhouse)", "seconds": seconds,
                                         "size_bytes": report["size_bytes"]}  # fmt: skip
        results["arm64_selfcheck"] = selfcheck(arm, work)
        for arch in ("amd64", "arm64"):
            docker("rmi", "-f", BASE.format(arch=arch), check=False)
    prune_build_cache()
    out = ROOT / "bench" / "results" / "arm64.json"
    out.write_text(json.dumps(results, indent=1) + "\n")
    print_table(results)
    print(f"wrote {out}")


def selfcheck(root: Path, work: Path) -> dict[str, object]:
    """The arm64 cell's self-check under QEMU (its image built again from the cache)."""
    bundle = marked_ca_bundle(root)
    result = imagekit("build", "--platform", "linux/arm64", "--ca-bundle", str(bundle),
                      cwd=root, timeout=1800)  # fmt: skip
    checked(result, "the arm64 cell again (cached)")
    (cell,) = (root / "reports").iterdir()
    tag = json.loads((cell / "build.json").read_text())["tags"][0]
    report = work / "selfcheck.json"
    seconds, test = timed("test", tag, "--json", str(report), cwd=root)
    docker("rmi", "-f", tag, check=False)
    checks = json.loads(report.read_text()).get("checks", []) if report.is_file() else []
    return {
        "seconds": seconds,
        "exit": test.returncode,
        "checks": {
            c["name"]: [c["status"], c.get("seconds"), (c.get("reason") or "")[:160]]
            for c in checks
        },
    }


def print_table(results: dict) -> None:  # type: ignore[type-arg]
    boot = results["bootstrap_s"]
    os_stage = results["os_stage"]
    rows = [
        ("bootstrap Debian 12 (debootstrap)", boot["amd64"], boot["arm64"]),
        ("the OS stage, cold (apt, user)", os_stage["amd64"]["seconds"],
         os_stage["arm64"]["seconds"]),
    ]  # fmt: skip
    print(f"{'':44} {'amd64':>8} {'arm64':>8} {'ratio':>6}")
    for name, amd, arm in rows:
        print(f"{name:44} {amd:8.1f} {arm:8.1f} {arm / amd:6.1f}")
    for step, arm in os_stage["arm64"]["steps"].items():
        amd = os_stage["amd64"]["steps"].get(step)
        if amd:
            print(f"  {step[:42]:42} {amd:8.1f} {arm:8.1f} {arm / amd:6.1f}")
    cell = results["arm64_cell"]
    near = results["amd64_nearest_cell"]
    size = cell["size_bytes"] / 1e9
    print(f"arm64 CPU cell (torch 2.7.1), cold: {cell['seconds']} s, {size:.2f} GB")
    print(f"amd64 nearest cell ({near['torch']}), cold: {near['seconds']} s")
    check = results["arm64_selfcheck"]
    print(f"arm64 self-check under QEMU: {check['seconds']} s, exit {check['exit']}")
    for name, (status, seconds, *why) in check["checks"].items():
        print(f"  {name:12} {status:8} {seconds:<8} {''.join(why)[:60]}")
    if "arm64_onnx_cell" in results:
        onnx = results["arm64_onnx_cell"]
        print(f"arm64 CPU cell with onnx, cold: {onnx['seconds']} s, "
              f"{onnx['size_bytes'] / 1e9:.2f} GB")  # fmt: skip
        check = results["arm64_onnx_selfcheck"]
        print(f"its self-check under QEMU: {check['seconds']} s, exit {check['exit']}")
        for name, (status, seconds, *why) in check["checks"].items():
            print(f"  {name:12} {status:8} {seconds:<8} {''.join(why)[:60]}")


if __name__ == "__main__":
    main()
