"""CUDA forward compatibility at container start: pure decisions, thin readers, one `main`.

A driver older than the image's CUDA major needs (CUDA 13 on an R535 host) cannot run the
image's CUDA code, unless the image carries NVIDIA's forward-compatibility package
(`cuda-compat-X-Y`: a newer user-mode libcuda under /usr/local/cuda/compat, present in
nvidia/cuda images) and the GPU is a data-center part on a driver branch the package
supports. Then putting the compat directory first on LD_LIBRARY_PATH makes it work: the
AWS deep learning containers' entrypoint does the same when the host driver is older than
the compat libcuda. Sources: CUDA Compatibility guide, "Forward Compatibility"
(docs.nvidia.com/deploy/cuda-compatibility, read 2026-11-23); the branches come from the
`brand=...,driver>=B,driver<B+1` clauses of nvidia/cuda's own NVIDIA_REQUIRE_CUDA.

`python -m imagekit.runtime.fwdcompat` prints shell `export` lines for the entrypoint to eval
and says on stderr what it did and why. Stdlib only: it runs inside images.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from imagekit.contract import labels as label
from imagekit.contract.driver import PROC_DRIVER, read_driver, version_tuple
from imagekit.runtime import gpu_models

COMPAT_DIR = "/usr/local/cuda/compat"
LABELS = "/etc/imagekit/labels.json"
PROC_GPUS = "/proc/driver/nvidia/gpus/*/information"
# The brands NVIDIA's own images list for each forward-compatible branch (GeForce is not
# among them: consumer cards do not support forward compatibility).
BRANDS = [
    "unknown",
    "grid",
    "tesla",
    "nvidia",
    "quadro",
    "quadrortx",
    "nvidiartx",
    "vapps",
    "vpc",
    "vcs",
    "vws",
    "cloudgaming",
]


@dataclass(frozen=True)
class Decision:
    enable: bool
    needed: bool  # the driver is too old for the image without it
    reason: str


def requirement(cuda: str, branches: tuple[int, ...]) -> str:
    """NVIDIA_REQUIRE_CUDA for an image of CUDA `cuda`: the major's floor (minor-version
    compatibility), or, where the image carries the compat package, one of its branches."""
    clauses = [f"cuda>={cuda.split('.')[0]}.0"]
    for branch in branches:
        clauses += [f"brand={b},driver>={branch},driver<{branch + 1}" for b in BRANDS]
    return " ".join(clauses)


def decide(
    driver: str | None,
    need: str,
    gpu_names: tuple[str, ...],
    compat_driver: str | None,
    branches: tuple[int, ...],
) -> Decision:
    """Whether to put the compat libcuda first. `need`: the oldest driver the image's CUDA
    runs on natively; `compat_driver`: the version of the image's compat libcuda (None:
    the image has none); `branches`: the host driver branches the package supports."""
    if not driver:
        return Decision(False, False, "no NVIDIA driver is visible in this container")
    if version_tuple(driver) >= version_tuple(need):
        return Decision(False, False, f"driver {driver} runs this image's CUDA natively")
    if not compat_driver:
        return Decision(
            False,
            True,
            f"driver {driver} is older than {need}, and this image has no CUDA "
            "forward-compatibility package: update the host driver, or use the nvidia flavor",
        )
    consumer = [n for n in gpu_names if not _datacenter(n)]
    if consumer:
        return Decision(
            False,
            True,
            f"driver {driver} is older than {need}, and forward compatibility works only on "
            f"data-center GPUs, not on {consumer[0]}: update the host driver",
        )
    branch = version_tuple(driver)[0]
    if branch not in branches:
        listed = ", ".join(f"R{b}" for b in branches) or "none"
        return Decision(
            False,
            True,
            f"driver {driver} is older than {need}, and its branch R{branch} is not one the "
            f"image's forward-compatibility package supports ({listed}): update the driver",
        )
    if version_tuple(compat_driver) <= version_tuple(driver):
        return Decision(False, True, f"the compat libcuda {compat_driver} is not newer")
    return Decision(
        True,
        True,
        f"driver {driver} is older than {need}: using CUDA forward compatibility "
        f"(libcuda {compat_driver} from {COMPAT_DIR}) on this data-center GPU",
    )


def _datacenter(name: str) -> bool:
    """Known consumer and workstation parts are out; an unknown part is left to the
    container runtime, which already checked its brand against NVIDIA_REQUIRE_CUDA."""
    if "GEFORCE" in name.upper():
        return False
    model = gpu_models.model_of(name)
    return model is None or model.datacenter


# -- readers ---------------------------------------------------------------------------
def read_gpu_names(pattern: str | None = None) -> tuple[str, ...]:
    names = []
    for path in sorted(glob.glob(pattern or PROC_GPUS)):
        text = Path(path).read_text(encoding="utf-8", errors="replace")
        if found := re.search(r"^Model:\s*(.+)$", text, re.M):
            names.append(found.group(1).strip())
    return tuple(names)


def read_compat_driver(folder: str | None = None) -> str | None:
    """The version of the compat libcuda: libcuda.so.580.65.06 -> '580.65.06'."""
    versions = [
        m.group(1)
        for p in glob.glob(f"{folder or COMPAT_DIR}/libcuda.so.*")
        if (m := re.search(r"libcuda\.so\.(\d+\.\d+(?:\.\d+)?)$", p))
    ]
    return max(versions, key=version_tuple) if versions else None


def main(labels_path: str = LABELS) -> int:
    try:
        labels = json.loads(Path(labels_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return 0
    need = labels.get(label.MIN_DRIVER, "")
    branches = tuple(int(b) for b in labels.get(label.FORWARD_BRANCHES, "").split())
    if not need:
        return 0
    compat_driver = read_compat_driver()
    decision = decide(read_driver(PROC_DRIVER), need, read_gpu_names(), compat_driver, branches)
    if decision.needed:
        print(f"imagekit: {decision.reason}", file=sys.stderr)
    if decision.enable:
        path = os.environ.get("LD_LIBRARY_PATH", "")
        value = COMPAT_DIR + (":" + path if path else "")
        print(f"export LD_LIBRARY_PATH={shlex.quote(value)}")
        print(f"export IMAGEKIT_FORWARD_COMPAT={shlex.quote(compat_driver or '')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
