"""Parts of bench_floor (issue 54) that read the image it built: the first `import torch`
with bytecode and without (part 5), and the groups' overhead over a bare install, part by
part (part 6), with the small helpers both use."""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.bench_cold import PROBE
from devkit.realengine import HOST_CA, docker

EPOCH_TOUCH = "@315532800"
GROUPS = ("cuda", "torch", "features")
NO_PYC = "PYTHONPYCACHEPREFIX=/tmp/no-pyc"  # no .pyc found: all compiled from source
IMPORT_TORCH = "import time; t=time.perf_counter(); import torch; print(time.perf_counter()-t)"


def run_tail(command: list[str], **kw: Any) -> float:
    """A command's seconds; on failure, exit with the tail of its output."""
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False, **kw)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)}:\n{(done.stdout + done.stderr)[-4000:]}")
    return time.perf_counter() - started


def image_id(ref: str) -> str | None:
    found = docker("image", "inspect", "--format", "{{.Id}}", ref, check=False)
    return found.stdout.strip() if found.returncode == 0 else None


def frozen_set(tag: str) -> list[str]:
    """The image's own wheel set (name==version), without pip and imagekit's own packages."""
    frozen = docker("run", "--rm", "--entrypoint", "/opt/venv/bin/python", tag, "-c", PROBE)
    return [
        line
        for line in frozen.stdout.splitlines()
        if line and not line.lower().startswith(("pip==", "imagekit"))
    ]


def medians(rounds: list[dict[str, Any]], key: str) -> dict[str, float]:
    names = dict.fromkeys(name for r in rounds for name in r[key])
    return {name: statistics.median([r[key].get(name, 0.0) for r in rounds]) for name in names}


def first_import(tag: str, rounds: int) -> dict[str, Any]:
    """Part 5: the first `import torch` in a fresh container as the image runs, with its
    bytecode and with none found (every module compiled from source, on every start)."""
    found: dict[str, list[float]] = {"with_pyc_s": [], "without_pyc_s": []}
    for _ in range(rounds):
        for key, extra in (("with_pyc_s", []), ("without_pyc_s", ["-e", NO_PYC])):
            done = docker("run", "--rm", "--entrypoint", "/opt/venv/bin/python", *extra, tag,
                          "-c", IMPORT_TORCH)  # fmt: skip
            found[key].append(float(done.stdout.strip().splitlines()[-1]))
    with_pyc = statistics.median(found["with_pyc_s"])
    without = statistics.median(found["without_pyc_s"])
    return {**found, "saved_per_start_s": without - with_pyc, "speedup": without / with_pyc}


def bare_install(requirements: Path, uv: Path, work: Path, *flags: str) -> tuple[float, float]:
    """A bare uv install (fresh venv, empty cache) with `flags`, then one date on every file
    of the result: the seconds of each; the venv and cache go again."""
    work.mkdir(parents=True)
    venv = work / "venv"
    subprocess.run(["python3.11", "-m", "venv", "--without-pip", str(venv)], check=True)
    env = {**os.environ, "UV_CACHE_DIR": str(work / "uv-cache"), "SSL_CERT_FILE": HOST_CA}
    install = run_tail(
        [str(uv), "pip", "install", "-q", "--python", str(venv), "-r", str(requirements), *flags],
        env=env,
    )
    touch = run_tail(["find", str(venv), "-exec", "touch", "-h", "-d", EPOCH_TOUCH, "{}", "+"])
    shutil.rmtree(work)
    return install, touch


def overhead(tag: str, work: Path, result: dict[str, Any], rounds: int) -> dict[str, Any]:
    """Part 6: the groups' parts on the host, beside the floor: bytecode and one date."""
    work.mkdir(parents=True)
    requirements = work / "requirements.txt"
    requirements.write_text("\n".join(frozen_set(tag)) + "\n")
    tools = work / "tools"
    subprocess.run([sys.executable, "-m", "venv", str(tools)], check=True)
    subprocess.run([str(tools / "bin" / "pip"), "install", "-q", "uv"], check=True)
    uv = tools / "bin" / "uv"
    runs = [
        bare_install(requirements, uv, work / f"r{i}", "--compile-bytecode") for i in range(rounds)
    ]
    compiled, touched = [run[0] for run in runs], [run[1] for run in runs]
    shutil.rmtree(work)
    bare = statistics.median(r["floor_s"] for r in result["rounds"])
    path = medians(result["rounds"], "build_phases_s")
    groups = sum(path.get(f"group: {g}", 0.0) for g in GROUPS)
    return {
        "bare_install_s": bare,
        "bare_install_compile_bytecode_s": compiled,
        "touch_every_file_s": touched,
        "part_bytecode_s": statistics.median(compiled) - bare,
        "part_one_date_s": statistics.median(touched),
        "in_image_groups_s": groups,
        "in_image_groups_over_bare_install": groups / bare,
    }
