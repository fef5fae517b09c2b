"""Cold builds near the physical floor (issue 54): the README cell's cold build against the
floor, the physical floor and a hand-written Dockerfile, in one run on one engine.

Parts: (1) the base with the OS packages baked in (`base bootstrap --bake-packages`; the
old base tagged back at the end); (2) per round: cold build + push into an empty registry,
cold local build (its export's steps: "unpacking to", moby/moby#51442), the floor (bare `uv
pip install` of the image's wheels, empty cache); (3) the physical floors; build + push over
the serial floor (install + zstd -3 + loopback upload; goal 1.3x on containerd), build over
the floor (goal 2x; on containerd (build - unpack) / floor); (4) the pushed digests across
rounds, the twin cell (goal 1.4x); (5) the first `import torch` with bytecode and without;
(6) bytecode and one date on every file on the host; (7) a hand-written Dockerfile, cold and
warm; (8) the ratios against the last recorded run (bench/regression.py).

Usage: python -m bench.bench_floor [--rounds N] [--local-only] [--no-twin] [--no-bake]
       [--tolerance 0.15] [--strict]
Run once per engine (`bash .ci/engines.sh start containerd|classic|docker20`), --local-only
on the classic store and Docker 20.10 (no push, nothing after part 3). Writes
bench/results/floor-<engine>.json after each part; prunes BuildKit's cache and removes what
it built. Needs the engine, network to PyPI, docker-registry, oras and zstd.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from bench import regression
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
from bench.bench_coldpush import (
    image_sample,
    kind_of,
    layer_sizes,
    physical_floors,
    push_phases,
    twin_bytes,
)
from bench.floor_parts import first_import, frozen_set, image_id, overhead, run_tail
from devkit.realengine import DOCKER, HOST_CA, docker, prune_build_cache
from imagekit.buildtime.lockfile import CUDA_PARTS

ROOT = Path(__file__).resolve().parent.parent
PROOF = "of which after BuildKit (the platform proof, read back)"
BIG = 100_000_000  # bytes: a layer of packages, not of the build's own small files
TAG = f"{EMPTY}/{REPO}:{CELL}"
HAND = f"{EMPTY}/handwritten:1"
BASE = "debian:bookworm-slim"
KEEP_BASE = "imagekit-bench-floor/base-before:1"  # the old base, held by a tag during the run
TWIN = "3.13:debian13"
TWIN_CELL = CELL.replace("py3.11", "py3.13").replace("debian12", "debian13")
PIP_DEFAULT = 'pip: ["numpy<3", "tqdm>=4.66"]'
DOCKERFILE = """\
FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv \
ca-certificates && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
COPY requirements.txt /tmp/requirements.txt
RUN --mount=type=secret,id=ca PIP_CERT=/run/secrets/ca pip install --no-cache-dir \
-r /tmp/requirements.txt
COPY src/ /app/
"""
SOURCES = {
    "app.py": "from util import greet\n\nprint(greet('floor'))\n",
    "util.py": "def greet(name: str) -> str:\n    return f'hello {name}'\n",
}


def matrix(extra_pip: tuple[str, ...] = ()) -> str:
    """The README cell with uv, its source (../src) copied last, and extra pip packages."""
    text = MATRIX.replace("INSTALLER", "uv").replace(
        "features: [onnx]}", "features: [onnx],\n     source: ../src}"
    )
    pip = PIP_DEFAULT[:-1] + "".join(f', "{name}"' for name in extra_pip) + "]"
    return text.replace(PIP_DEFAULT, pip)


def write_sources(folder: Path, version: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in SOURCES.items():
        (folder / name).write_text(text + f"VERSION = {version}\n")


@contextlib.contextmanager
def baked_base(root: Path, bake: bool, result: dict[str, Any]) -> Iterator[None]:
    """Part 1: the base with the matrix's OS packages baked in, made before any timing; the
    old base is tagged back afterwards (if there was none, the baked one stays)."""
    old = image_id(BASE)
    if bake and old:
        docker("tag", BASE, KEEP_BASE)
    try:
        if bake:
            command = [sys.executable, "-m", "imagekit", "base", "bootstrap", "--suite"]
            command += ["bookworm", "--bake-packages", "--envs", "envs"]
            seconds = run_tail(command, cwd=root)
            result["base"] = {"baked": True, "bootstrap_s": seconds, "id": image_id(BASE)}
        else:
            result["base"] = {"baked": False, "id": old}
        yield
    finally:
        if bake and old:
            docker("tag", KEEP_BASE, BASE, check=False)
            docker("rmi", KEEP_BASE, check=False)


def one_round(root: Path, work: Path, push: bool) -> dict[str, Any]:
    """Part 2, one round: the cold build + push (into the empty registry that runs), the cold
    local build and the floor; the local image stays for what follows."""
    out: dict[str, Any] = {}
    if push:
        push_s, _, lines = cold_build(root, push=True)
        out["build_push_s"] = push_s
        out["push_phases_s"] = push_phases(lines, push_s)
        out["pushed_layers"] = list(layer_sizes(REPO, CELL).items())
    build_s, report, lines = cold_build(root, push=False)
    out["build_s"] = build_s
    out["build_phases_s"] = phases(lines, build_s)
    out["export_steps_s"] = export_steps(lines)
    out["unpack_s"] = out["export_steps_s"].get("unpacking to", 0.0)
    out["image_bytes"] = sum(int(x["size_bytes"]) for x in report["layers"])
    out["floor_s"] = floor(TAG, work)
    return out


def floor_ratios(result: dict[str, Any]) -> dict[str, float | None]:
    """Part 3's ratios, each the median of each round's figure over that round's floor."""
    rounds = result["rounds"]
    seconds = result["physical_floors"]["seconds"]
    compress = seconds["zstd -3 of the image, 2 cores"]
    upload = seconds["upload the pushed bytes over loopback"]
    out: dict[str, float | None] = {
        "build_over_floor": statistics.median(r["build_s"] / r["floor_s"] for r in rounds),
        "build_minus_unpack_over_floor": statistics.median(
            (r["build_s"] - r["unpack_s"]) / r["floor_s"] for r in rounds
        ),
        "unpack_over_floor": statistics.median(r["unpack_s"] / r["floor_s"] for r in rounds),
        "build_push_over_serial_floor": None,
    }
    if "build_push_s" in rounds[0]:
        out["build_push_over_serial_floor"] = statistics.median(
            r["build_push_s"] / (r["floor_s"] + compress + upload) for r in rounds
        )
        # the same without the pushed image's read-back (the platform proof after BuildKit)
        out["build_push_before_proof_over_serial_floor"] = statistics.median(
            (r["build_push_s"] - r["push_phases_s"].get(PROOF, 0.0))
            / (r["floor_s"] + compress + upload)
            for r in rounds
        )
    result["serial_floor_s"] = statistics.median(r["floor_s"] for r in rounds) + compress + upload
    return out


def reproduced(rounds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Part 4: for each pushed layer's index, whether its digest is the same in every round."""
    out = []
    for index, (digest, size) in enumerate(rounds[0]["pushed_layers"]):
        same = all(
            len(r["pushed_layers"]) > index and r["pushed_layers"][index][0] == digest
            for r in rounds
        )
        out.append({"index": index, "digest": digest, "size": size, "same_every_round": same})
    return out


def twin_part(root: Path) -> dict[str, Any]:
    """Part 4's twin: registry bytes of both cells over one, and the layers they share; its
    base (debian:trixie-slim) removed again where the run made it."""
    had_base = image_id("debian:trixie-slim") is not None
    out = twin_bytes(root, TWIN)
    if "ratio" in out:
        first, second = layer_sizes(REPO, CELL), layer_sizes(REPO, TWIN_CELL)
        out["shared_layers"] = [
            {"index": i, "digest": d, "size": s}
            for i, (d, s) in enumerate(first.items())
            if d in second
        ]
    (root / "envs" / "cold.yaml").write_text(matrix())  # twin_bytes rewrote it
    docker("rmi", f"{EMPTY}/{REPO}:{TWIN_CELL}", check=False)
    if not had_base:
        docker("rmi", "debian:trixie-slim", check=False)
    return out


def hand_build(folder: Path) -> dict[str, float]:
    """The hand-written Dockerfile's build and push, each timed (BuildKit's cache as it is)."""
    env = {**os.environ, "DOCKER_BUILDKIT": "1"}
    build = [DOCKER, "build", "--secret", f"id=ca,src={HOST_CA}", "-t", HAND, "."]
    build_s = run_tail(build, cwd=folder, env=env)
    push_s = run_tail([DOCKER, "push", HAND])
    return {"build_s": build_s, "push_s": push_s, "total_s": build_s + push_s}


def warm_build(root: Path, cache: Path) -> float:
    """imagekit's build + push on BuildKit's cache and imagekit's own as they are (no prune)."""
    command = [sys.executable, "-m", "imagekit", "build", "--envs", "envs", "--push"]
    command += ["--ca-bundle", HOST_CA, "--progress", "plain"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "IMAGEKIT_CACHE_DIR": str(cache)}
    return run_tail(command, cwd=root, env=env)


def handwritten_part(tmp: Path, root: Path) -> dict[str, Any]:
    """Part 7: the hand-written Dockerfile cold, then warm (one pip package added, the source
    changed), each build + push, then imagekit's the same way, each into an empty registry."""
    hand, wanted = tmp / "handwritten", frozen_set(TAG)
    write_sources(hand / "src", 1)
    (hand / "Dockerfile").write_text(DOCKERFILE)
    (hand / "requirements.txt").write_text("\n".join(wanted) + "\n")
    out: dict[str, Any] = {"requirements": len(wanted)}
    with empty_registry(registry_dir(tmp, "hand")):
        prune_build_cache()
        out["hand_cold"] = hand_build(hand)
        with (hand / "requirements.txt").open("a") as requirements:
            requirements.write("tabulate\n")
        out["hand_w1"] = hand_build(hand)
        write_sources(hand / "src", 2)
        out["hand_w2"] = hand_build(hand)
    docker("rmi", HAND, check=False)
    cache = tmp / "imagekit-cache"  # the cold build's, as a user's machine keeps it
    with empty_registry(registry_dir(tmp, "imagekit")):
        out["imagekit_cold_s"] = cold_build(root, push=True, cache=cache)[0]
        (root / "envs" / "cold.yaml").write_text(matrix(("tabulate",)))
        out["imagekit_w1_s"] = warm_build(root, cache)
        write_sources(root / "src", 2)
        out["imagekit_w2_s"] = warm_build(root, cache)
    for step in ("cold", "w1", "w2"):
        out[f"handwritten_over_imagekit_{step}"] = (
            out[f"hand_{step}"]["total_s"] / out[f"imagekit_{step}_s"]
        )
    return out


def registry_dir(tmp: Path, name: str) -> Path:
    shutil.rmtree(tmp / f"registry-{name}", ignore_errors=True)
    (tmp / f"registry-{name}").mkdir()
    return tmp / f"registry-{name}"


def run_parts(args: argparse.Namespace, tmp: Path, root: Path, result: dict[str, Any]) -> None:
    """Parts 2 to 7, each saved as it comes; the registry of the last round stays up for the
    physical floors and the twin."""
    push = not args.local_only
    result["rounds"] = []
    for index in range(args.rounds):
        with empty_registry(registry_dir(tmp, "rounds")):
            result["rounds"].append(one_round(root, tmp / f"floor{index}", push))
            save(result)
            if index < args.rounds - 1:
                continue
            last = result["rounds"][-1]
            pushed = sum(size for _, size in last.get("pushed_layers", []))
            result["physical_floors"] = physical_floors(
                tmp / "floors", image_sample(TAG), last["image_bytes"], pushed
            )
            result["ratios"] = floor_ratios(result)
            save(result)
            if args.local_only:
                return
            result["layers_reproduced"] = reproduced(result["rounds"])
            if not args.no_twin:
                result["twin"] = twin_part(root)
                result["ratios"]["twin_ratio"] = result["twin"].get("ratio")
            save(result)
    result["first_import_torch"] = first_import(TAG, args.rounds)
    result["ratios"]["pyc_start_speedup"] = result["first_import_torch"]["speedup"]
    save(result)
    result["groups_overhead"] = overhead(TAG, tmp / "overhead", result, args.rounds)
    save(result)
    result["handwritten"] = handwritten_part(tmp, root)
    for step in ("cold", "w1", "w2"):
        key = f"handwritten_over_imagekit_{step}"
        result["ratios"][key] = result["handwritten"][key]
    save(result)


def goals(result: dict[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    """Each goal, its value and whether it is met (None where not measured)."""
    ratios = result.get("ratios", {})
    # the big layers (the base, the CUDA libraries' parts, torch, the features): the small
    # ones carry the build's own files (the context's COPYs, the user's home)
    layers = result.get("layers_reproduced")
    big = [x["same_every_round"] for x in layers or [] if x["size"] >= BIG] or None
    twin = result.get("twin", {}).get("shared_layers")
    shared = len([x for x in twin if x["size"] >= BIG]) if twin is not None else None
    build_key = "build_minus_unpack_over_floor" if kind == "containerd" else "build_over_floor"
    table = {
        "build + push / serial floor <= 1.3x (containerd)": (
            ratios.get("build_push_over_serial_floor"), 1.3, "le"),
        f"{build_key} <= 2x": (ratios.get(build_key), 2.0, "le"),
        "twin registry bytes <= 1.4x": (ratios.get("twin_ratio"), 1.4, "le"),
        "hand-written / imagekit, cold build + push >= 1x": (
            ratios.get("handwritten_over_imagekit_cold"), 1.0, "ge"),
        "layers over 100 MB: digests the same every round": (all(big) if big else None, True, "eq"),
        "the twin shares the CUDA libraries' parts": (shared, len(CUDA_PARTS), "ge"),
    }  # fmt: skip
    out = {}
    for name, (value, goal, how) in table.items():
        met = None
        if value is not None:
            met = value <= goal if how == "le" else value >= goal if how == "ge" else value == goal
        out[name] = {"value": value, "goal": goal, "met": met}
    return out


def print_tables(result: dict[str, Any]) -> None:
    """What, seconds, x floor; then the goals, met or not."""
    rounds = result["rounds"]
    floor_s = statistics.median(r["floor_s"] for r in rounds)
    rows = {"bare uv install (the floor)": floor_s}
    rows["cold local build"] = statistics.median(r["build_s"] for r in rounds)
    rows["  of which unpacking to"] = statistics.median(r["unpack_s"] for r in rounds)
    if "build_push_s" in rounds[0]:
        rows["cold build + push"] = statistics.median(r["build_push_s"] for r in rounds)
        rows["  of which the platform proof, read back"] = statistics.median(
            r["push_phases_s"].get(PROOF, 0.0) for r in rounds
        )
    if "serial_floor_s" in result:
        rows["serial floor (install + zstd + upload)"] = result["serial_floor_s"]
    for name, seconds in result.get("physical_floors", {}).get("seconds", {}).items():
        rows[f"  physical: {name}"] = seconds
    for key, value in result.get("groups_overhead", {}).items():
        if key.startswith(("part_", "in_image_groups_s")):
            rows[f"  groups: {key}"] = value
    hand = result.get("handwritten", {})
    for step in ("cold", "w1", "w2") if hand else ():
        rows[f"hand-written {step}, build + push"] = hand[f"hand_{step}"]["total_s"]
        rows[f"imagekit {step}, build + push"] = hand[f"imagekit_{step}_s"]
    print(f"engine: {result['engine']}; {len(rounds)} round(s), medians")
    print(f"  {'what':<46}{'seconds':>9}{'x floor':>9}")
    for name, seconds in rows.items():
        print(f"  {name:<46}{seconds:>9.1f}{seconds / floor_s:>8.2f}x")
    if "first_import_torch" in result:
        start = result["first_import_torch"]
        print(f"first import torch: saved {start['saved_per_start_s']:.2f} s per start "
              f"({start['speedup']:.2f}x without bytecode)")  # fmt: skip
    print(f"  {'goal':<58}{'value':>8}  met?")
    for name, goal in result.get("goals", {}).items():
        value = goal["value"]
        shown = "-" if value is None else f"{float(value):.2f}"
        print(f"  {name:<58}{shown:>8}  {goal['met']}")


def save(result: dict[str, Any]) -> Path:
    out = ROOT / "bench" / "results" / f"floor-{kind_of(str(result['engine']))}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    return out


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3, help="cold rounds; medians")
    parser.add_argument("--local-only", action="store_true", help="no push, nothing after 3")
    parser.add_argument("--no-twin", action="store_true", help="skip the twin cell")
    parser.add_argument("--no-bake", action="store_true", help="the base as it is")
    parser.add_argument("--tolerance", type=float, default=regression.DEFAULT_TOLERANCE)
    parser.add_argument("--strict", action="store_true", help="exit 1 on a regression")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    ready_engine()
    engine = engine_name()
    kind = kind_of(engine)
    path = ROOT / "bench" / "results" / f"floor-{kind}.json"
    last = json.loads(path.read_text()) if path.exists() else None  # before the first save
    result: dict[str, Any] = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {len(os.sched_getaffinity(0))} CPUs",
        "engine": engine,
        "args": vars(args),
    }
    try:
        with tempfile.TemporaryDirectory() as name:
            tmp = Path(name)
            root = tmp / "project"
            (root / "envs").mkdir(parents=True)
            (root / "envs" / "cold.yaml").write_text(matrix())
            write_sources(root / "src", 1)
            with baked_base(root, not args.no_bake, result):
                save(result)
                run_parts(args, tmp, root, result)
    finally:
        docker("rmi", "-f", TAG, HAND, check=False)
        docker("image", "prune", "-f", check=False)  # dangling only: the bases stay
        prune_build_cache()
    result["goals"] = goals(result, kind)
    rows = regression.compare((last or {}).get("ratios", {}), result.get("ratios", {}),
                              args.tolerance)  # fmt: skip
    result["regression"] = {"last_date": (last or {}).get("date"), "tolerance": args.tolerance,
                            "rows": regression.as_json(rows)}  # fmt: skip
    print_tables(result)
    regression.print_rows(rows, args.tolerance, (last or {}).get("date"))
    print(f"wrote {save(result).relative_to(ROOT)}")
    if args.strict and regression.regressed(rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
