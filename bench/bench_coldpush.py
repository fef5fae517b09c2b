"""Cold builds on the engine that runs (issue 38): the README cell built cold, built and
pushed cold (`imagekit build --push`: straight from BuildKit in zstd where the engine can,
else loaded and pushed by the engine in gzip), each against the floor (a bare `uv pip
install` of the same wheels into a fresh venv, empty cache), beside the physical floors of
each part on this machine; and, with --pulls, a cold `docker pull` of the zstd image against
the gzip one, and with --twin, the registry bytes of a second cell that differs only in Python.

Usage: python -m bench.bench_coldpush [--pulls N] [--twin 3.12] [--skip-build]
Run it once per engine (`bash .ci/engines.sh start containerd|classic|docker20`); it writes
bench/results/coldpush-<engine>.json. Needs the engine, network to PyPI and docker-registry;
it prunes BuildKit's cache and removes what it built.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

from bench.bench_cold import (
    CELL,
    EMPTY,
    MATRIX,
    REPO,
    cold_build,
    empty_registry,
    engine_name,
    export_steps,
    floor,
    phases,
    ready_engine,
)
from devkit.realengine import (
    DOCKER,
    HOST_CA,
    docker,
    prune_build_cache,
)
from imagekit.engine.image_registry import pushed_image

ROOT = Path(__file__).resolve().parent.parent

TAG = f"{EMPTY}/{REPO}:{CELL}"


def layer_sizes(repo: str, tag: str) -> dict[str, int]:
    """The image's layers in the bench's own registry: blob digest -> compressed size."""
    return {x.digest: x.size for x in pushed_image(f"{EMPTY}/{repo}:{tag}").layers}


_PUSHING = re.compile(r"#\d+ (pushing layers|pushing manifest|pushing layer)")
_BUILDKIT_LINE = re.compile(r"\] #\d+ ")  # a line of BuildKit's progress, as imagekit prints it
_BUILT = re.compile(r"\] built$")  # imagekit's word that a cell is done


def kind_of(engine: str) -> str:
    """containerd, classic (Docker 28 on its classic store) or docker20."""
    if "containerd" in engine:
        return "containerd"
    return "docker20" if engine.startswith("Docker 20.") else "classic"


def push_phases(lines: list[tuple[float, str]], total: float) -> dict[str, float]:
    """Where a build + push goes: the build's own phases, then from BuildKit's export of
    the image (compression, and the upload beside it) to the end."""
    out = phases(lines, total)
    starts = [at for at, text in lines if re.search(r"#\d+ exporting to image", text)]
    pushes = [at for at, text in lines if _PUSHING.search(text)]
    if starts:
        out["export, compression and upload (from BuildKit's export to the end)"] = (
            total - starts[0]
        )
        out.pop("export of the image", None)
    if pushes:
        out["of which after the first pushed byte"] = total - pushes[0]
    built = [at for at, text in lines if _BUILT.search(text)]
    if built and starts:
        # from BuildKit's last line to imagekit's "built": the pushed image read back
        buildkit = [at for at, text in lines if _BUILDKIT_LINE.search(text) and at <= built[0]]
        out["of which after BuildKit (the platform proof, read back)"] = built[0] - buildkit[-1]
    return out


def timed(command: list[str], **kw: object) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, **kw)  # type: ignore[call-overload]
    return time.perf_counter() - started


def image_sample(ref: str, size: int = 2**30) -> bytes:
    """The first `size` bytes of the image's own layers, as `docker save` streams them."""
    with subprocess.Popen([DOCKER, "save", ref], stdout=subprocess.PIPE) as proc:
        assert proc.stdout is not None
        data = proc.stdout.read(size)
        proc.kill()
    return data


def physical_floors(work: Path, sample: bytes, image_bytes: int, pushed_bytes: int) -> dict:  # type: ignore[type-arg]
    """Each part's floor on this machine, measured on a sample of the image and scaled to
    it: writing the unpacked bytes once, compressing them (zstd -3 and gzip -6: BuildKit's
    and Docker's default levels; one core, and two), uploading the pushed bytes to a
    registry on 127.0.0.1."""
    work.mkdir(parents=True, exist_ok=True)
    path = work / "sample"
    path.write_bytes(sample)
    size = len(sample)
    rates: dict[str, float] = {}
    rates["disk write (fdatasync)"] = size / timed(
        ["dd", f"if={path}", f"of={work / 'written'}", "bs=16M", "conv=fdatasync"],
        stderr=subprocess.DEVNULL,
    )
    for name, command in {
        "zstd -3, 1 core": ["zstd", "-3", "-T1", "-q", "-c", str(path)],
        "zstd -3, 2 cores": ["zstd", "-3", "-T2", "-q", "-c", str(path)],
        "gzip -6, 1 core": ["gzip", "-6", "-c", str(path)],
    }.items():
        with open(work / "out", "wb") as out:
            rates[name] = size / timed(command, stdout=out)
    rates["gzip -6, 2 cores (two streams)"] = 2 * rates["gzip -6, 1 core"]
    upload = work / "upload"
    upload.write_bytes(os.urandom(2**28))
    rates["loopback upload to the registry"] = upload.stat().st_size / timed(
        ["oras", "blob", "push", "--plain-http", f"{EMPTY}/floor-probe", str(upload)],
        stdout=subprocess.DEVNULL,
    )
    seconds = {
        "write the unpacked image once": image_bytes / rates["disk write (fdatasync)"],
        "zstd -3 of the image, 2 cores": image_bytes / rates["zstd -3, 2 cores"],
        "zstd -3 of the image, 1 core": image_bytes / rates["zstd -3, 1 core"],
        "gzip -6 of the image, 2 cores": image_bytes / rates["gzip -6, 2 cores (two streams)"],
        "gzip -6 of the image, 1 core": image_bytes / rates["gzip -6, 1 core"],
        "upload the pushed bytes over loopback": pushed_bytes
        / rates["loopback upload to the registry"],
    }
    for leftover in (path, work / "written", work / "out", upload):
        leftover.unlink(missing_ok=True)
    return {"MB_per_s": {k: v / 1e6 for k, v in rates.items()}, "seconds": seconds}


def remove_local(*refs: str) -> None:
    docker("rmi", "-f", *refs, check=False)
    docker("image", "prune", "-af", check=False)


def cold_pulls(root: Path, rounds: int) -> dict[str, list[float]]:
    """The same image pushed in zstd and in gzip (both from the cache: export and push only),
    then pulled cold in turn, `rounds` times each."""
    refs = {}
    for kind in ("zstd", "gzip"):
        more = ["--compression", kind, "--tag-suffix", f"-{kind}"]
        command = [sys.executable, "-m", "imagekit", "build", "--envs", "envs", "--push", *more]
        command += ["--ca-bundle", HOST_CA]
        subprocess.run(command, cwd=root, check=True, capture_output=True)
        refs[kind] = f"{TAG}-{kind}"
    found: dict[str, list[float]] = {"zstd": [], "gzip": []}
    for _ in range(rounds):
        for kind, ref in refs.items():
            remove_local(*refs.values())
            started = time.perf_counter()
            docker("pull", ref, timeout=1800)
            found[kind].append(time.perf_counter() - started)
    remove_local(*refs.values())
    return found


def twin_bytes(root: Path, twin: str) -> dict[str, object]:
    """Registry bytes of the README cell and its twin on another Python (`3.13:debian13`:
    and that OS, where this Python is the system's; uv's own Pythons come from GitHub,
    which this machine cannot reach)."""
    python, _, os_name = twin.partition(":")
    envs = root / "envs" / "cold.yaml"
    matrix = MATRIX.replace('python: "3.11"', f'python: "{python}"').replace("INSTALLER", "uv")
    if os_name:
        matrix = matrix.replace("os: debian12", f"os: {os_name}")
    envs.write_text(matrix)
    command = [sys.executable, "-m", "imagekit", "build", "--envs", "envs", "--push"]
    command += ["--ca-bundle", HOST_CA, "--progress", "plain", "--bootstrap-base"]
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return {"failed": (done.stdout + done.stderr)[-4000:]}
    twin_id = CELL.replace("py3.11", f"py{python}").replace("debian12", os_name or "debian12")
    first = layer_sizes(REPO, CELL)
    second = layer_sizes(REPO, twin_id)
    union = first | second
    shared = {d: s for d, s in first.items() if d in second}
    return {
        "one_image_bytes": sum(first.values()),
        "both_bytes": sum(union.values()),
        "ratio": sum(union.values()) / sum(first.values()),
        "shared_bytes": sum(shared.values()),
        "twin_own": {str(i): s for i, (d, s) in enumerate(second.items()) if d not in first},
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pulls", type=int, default=0, help="cold pulls, zstd vs gzip")
    parser.add_argument("--twin", default="", help="a second cell: PYTHON[:OS]")
    args = parser.parse_args()
    ready_engine()
    engine = engine_name()
    result: dict[str, object] = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} CPUs",
        "engine": engine,
    }
    with tempfile.TemporaryDirectory() as tmp, empty_registry(Path(tmp)):
        root = Path(tmp) / "project"
        (root / "envs").mkdir(parents=True)
        (root / "envs" / "cold.yaml").write_text(MATRIX.replace("INSTALLER", "uv"))
        build_s, _, lines = cold_build(root, push=False)
        result["cold_build_s"] = build_s
        result["build_critical_path_s"] = phases(lines, build_s)
        result["build_export_steps_s"] = export_steps(lines)
        floor_s = floor(TAG, Path(tmp) / "floor")
        result["floor_s"] = floor_s
        sample = image_sample(TAG)  # the cold build's local image, before the push run
        image_bytes = sum(
            int(x["size_bytes"])
            for x in json.loads((root / "reports" / CELL / "build.json").read_text())["layers"]
        )
        push_s, report, lines = cold_build(root, push=True)
        result["cold_build_push_s"] = push_s
        result["push_report"] = {k: report[k] for k in ("push_path", "push_compression", "sizes")}
        result["push_critical_path_s"] = push_phases(lines, push_s)
        pushed_bytes = sum(layer_sizes(REPO, CELL).values())
        result["image_bytes"], result["pushed_bytes"] = image_bytes, pushed_bytes
        result["physical_floors"] = physical_floors(
            Path(tmp) / "floors", sample, image_bytes, pushed_bytes
        )
        result["ratios"] = {"build": build_s / floor_s, "build_push": push_s / floor_s}
        save(result)  # each part as it comes: a later part's failure keeps the earlier ones
        if args.pulls:
            result["cold_pull_s"] = cold_pulls(root, args.pulls)
            save(result)
        if args.twin:
            result["twin"] = twin_bytes(root, args.twin)
            save(result)
        remove_local(TAG)
    prune_build_cache()
    print_table(result)
    print(f"wrote {save(result).relative_to(ROOT)}")


def save(result: dict[str, object]) -> Path:
    out = ROOT / "bench" / "results" / f"coldpush-{kind_of(str(result['engine']))}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    return out


def print_table(result: dict) -> None:  # type: ignore[type-arg]
    floor_s = float(result["floor_s"])
    print(f"engine: {result['engine']}; floor (bare uv install) {floor_s:.1f} s")
    for key, goal in (("cold_build_s", "2x"), ("cold_build_push_s", "3x")):
        seconds = float(result[key])
        print(f"  {key:<20}{seconds:>8.1f} s {seconds / floor_s:>6.2f}x  goal {goal}")
    for name in ("build_critical_path_s", "push_critical_path_s"):
        print(f"{name}:")
        for part, seconds in result[name].items():
            print(f"  {seconds:>7.1f} s  {part}")
    print("physical floors on this machine:")
    for part, seconds in result["physical_floors"]["seconds"].items():
        print(f"  {seconds:>7.1f} s  {part}")
    if "cold_pull_s" in result:
        pulls = {k: statistics.median(v) for k, v in result["cold_pull_s"].items()}
        print(f"cold pull: zstd {pulls['zstd']:.1f} s, gzip {pulls['gzip']:.1f} s, "
              f"gzip/zstd {pulls['gzip'] / pulls['zstd']:.2f}x")  # fmt: skip
    if "twin" in result and "ratio" in result["twin"]:
        print(f"registry bytes, both cells over one: {result['twin']['ratio']:.2f}x")


if __name__ == "__main__":
    main()
