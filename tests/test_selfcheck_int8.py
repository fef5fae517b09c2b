"""The int8 check's scheme per CPU, its verdict, the /proc/cpuinfo reader, and a real run of
onnxruntime's quantized kernels on an emulated CPU without VNNI (qemu-user)."""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from imagekit.selfcheck.readers.cpuinfo import parse_cpuinfo, read_cpu
from imagekit.selfcheck.verdicts.int8 import (
    U8S8_TOLERANCE,
    Int8Scheme,
    dot_product,
    int8_scheme,
    int8_verdict,
)

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "cpuinfo"
CPUS: list[dict[str, Any]] = json.loads((DATA / "cpus.json").read_text())["cpus"]


@pytest.mark.parametrize("cpu", CPUS, ids=[c["cpu"].split(" (")[0] for c in CPUS])
def test_scheme_for_real_cpu_flags(cpu: dict[str, Any]) -> None:
    flags = cpu["flags"].split()
    scheme = int8_scheme(flags)
    assert scheme.name == cpu["scheme"]
    assert dot_product(flags) == cpu["dot_product"]
    assert scheme.activation_type == "QUInt8" and not scheme.reduce_range
    assert scheme.weight_type == {"U8S8": "QInt8", "U8U8": "QUInt8"}[cpu["scheme"]]
    assert cpu["source"]


def test_unknown_cpu_takes_the_scheme_that_never_saturates() -> None:
    assert int8_scheme([]).name == "U8U8"
    assert "not read" in int8_scheme([]).why
    # AVX-512 without VNNI (Skylake-SP) saturates like AVX2: U8U8
    assert int8_scheme(["avx2", "avx512f", "avx512bw", "avx512vl"]).name == "U8U8"
    assert int8_scheme(["AVX512_VNNI"]).name == "U8S8"  # flags compared without case


@pytest.mark.parametrize("cpu", [c for c in CPUS if c["file"]], ids=lambda c: c["file"])
def test_read_cpu_gives_the_snapshot_cpu_dict(cpu: dict[str, Any]) -> None:
    read = read_cpu(str(DATA / cpu["file"]))
    assert read["flags"] == cpu["flags"].split()
    assert read["model"]


def test_read_cpu_names_models_and_leaves_out_what_it_cannot_read(tmp_path: Path) -> None:
    assert read_cpu(str(DATA / "epyc-9754-zen4c.txt"))["model"] == (
        "AMD EPYC 9754 128-Core Processor"
    )
    assert read_cpu(str(DATA / "graviton3-neoverse-v1.txt"))["model"] == "Arm Neoverse V1"
    assert read_cpu(str(tmp_path / "missing")) == {}
    odd = parse_cpuinfo("CPU implementer\t: 0xc0\nCPU part\t: 0xac3\n")
    assert odd == {"model": "Arm implementer 0xc0 part 0xac3", "implementer": "0xc0"}  # no flags


U8S8 = int8_scheme(["avx512_vnni"])
U8U8 = int8_scheme(["avx2"])


@pytest.mark.parametrize(
    ("error", "scheme", "ok", "words"),
    [
        (0.0148, U8S8, True, "U8S8 output 1.5% off fp32"),
        # the healthy EPYC without VNNI that U8S8 failed at 8.1% (issue 26)
        (0.081, U8S8, False, "8.1% off fp32 (limit 5% for U8S8"),
        (0.0127, U8U8, True, "limit 5% for U8U8: x86 without VNNI"),
        (0.081, U8U8, False, "8.1% off fp32 (limit 5% for U8U8"),
        (math.nan, U8U8, False, "not finite"),
        (math.inf, U8S8, False, "not finite"),
    ],
)
def test_int8_verdict(error: float, scheme: Int8Scheme, ok: bool, words: str) -> None:
    got_ok, reason = int8_verdict(error, scheme)
    assert got_ok is ok and words in reason


# -- onnxruntime's real kernels on a CPU without VNNI --------------------------------------------

# Pinned so a change in onnxruntime's kernels shows as a version bump, not a flaky test.
ORT_PACKAGES = ("onnxruntime==1.32.0", "onnx==1.23.2", "numpy==2.4.6")
SCRIPT = ROOT / "tests" / "tools" / "int8_schemes.py"


@pytest.fixture(scope="session")
def ort_python() -> Path:
    """A venv with onnxruntime, onnx and numpy from PyPI, kept in the user's cache folder."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    venv = cache / "imagekit-tests" / ("ort-" + "-".join(p.split("==")[1] for p in ORT_PACKAGES))
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, *ORT_PACKAGES], check=True, timeout=300)
    return python


def schemes_run(command: list[str], workdir: Path) -> dict[str, Any]:
    out = subprocess.run(
        [*command, str(SCRIPT), str(workdir)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


@pytest.mark.slow
@pytest.mark.subprocess
def test_no_vnni_scheme_holds_on_an_emulated_cpu_without_vnni(
    ort_python: Path, tmp_path: Path
) -> None:
    qemu = shutil.which("qemu-x86_64")
    if qemu is None or platform.machine() != "x86_64":
        pytest.skip(
            "qemu-x86_64 (Debian package qemu-user, installed by .ci/setup-host.sh) is not "
            "on PATH, or this host is not x86_64: cannot emulate a CPU without VNNI"
        )
    (tmp_path / "haswell").mkdir()
    run = schemes_run([qemu, "-cpu", "Haswell", str(ort_python)], tmp_path / "haswell")
    assert run["cpu"] == {"AVX2": True, "AVX512F": False, "AVX512VNNI": False}
    # A Haswell's flags: AVX2, no VNNI (the E5-2686 v4 line is the Broadwell next of kin).
    broadwell = next(c for c in CPUS if "E5-2686" in c["cpu"])["flags"].split()
    scheme = int8_scheme(broadwell)
    assert scheme.name == "U8U8"
    errors = run["errors"]
    assert errors["U8U8"] <= scheme.tolerance, errors
    # Observed with onnxruntime 1.32.0: U8S8 saturates there (10.0%), the false red of
    # issue 26; the emulation reproduces it, so the test above is not vacuous.
    assert errors["U8S8"] > U8S8_TOLERANCE, errors
    assert errors["U8S8-reduce-range"] <= U8S8_TOLERANCE, errors

    (tmp_path / "native").mkdir()
    native = schemes_run([str(ort_python)], tmp_path / "native")
    here = int8_scheme(read_cpu().get("flags", []))
    assert native["errors"][here.name] <= here.tolerance, (here, native)
