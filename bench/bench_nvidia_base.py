"""What the nvidia flavor saves by running on nvidia/cuda's `-base` image (issue 14, item 4).

torch's CUDA wheels bring their own CUDA libraries (nvidia-* packages). The nvidia flavor's
runtime used to be `nvidia/cuda:X-cudnn-runtime`, which carries cuDNN, cuBLAS, cuFFT, cuRAND,
cuSOLVER, cuSPARSE, NCCL, NVRTC and nvJitLink a second time; `-base` carries only cudart and
the forward-compatibility package. nvidia/cuda cannot be pulled on this machine, so:
- measured: the slim flavor's layers (`docker history`) of a built cell, and the installed size
  of every nvidia-* library in its venv;
- computed: the nvidia flavor before and after, as those same layers plus the libraries
  cudnn-runtime holds twice (the wheels' installed sizes of the libraries it also ships).

Usage: python -m bench.bench_nvidia_base [IMAGE]   (default: the README cell's image, which
`bash scripts/quickstart.sh` builds). Writes bench/results/nvidia-base.json.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCKER = "/usr/bin/docker"
DEFAULT = "ghcr.io/example-org/pytorch-train:2.7.1-cu126-py3.11-debian12-slim"
# The libraries nvidia/cuda's -cudnn-runtime image ships too (its cuda-libraries +
# libcudnn + libnccl packages); CUPTI, cuFile and NVTX are only in -devel or not at all.
IN_CUDNN_RUNTIME = [
    "cudnn",
    "cublas",
    "cusparse",
    "cufft",
    "nccl",
    "cusolver",
    "curand",
    "cuda_nvrtc",
    "nvjitlink",
    "cuda_runtime",
]


def run(*args: str) -> str:
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout


def layers(image: str) -> list[tuple[int, str]]:
    out = run(DOCKER, "history", "--no-trunc", "--human=false", "--format", "{{json .}}", image)
    rows = [json.loads(line) for line in out.splitlines()]
    return [(int(r["Size"]), r["CreatedBy"][:70]) for r in reversed(rows)]


def libraries(image: str) -> dict[str, int]:
    script = "du -s -B1 /opt/venv/lib/python3*/site-packages/nvidia/*/ 2>/dev/null"
    out = run(DOCKER, "run", "--rm", "--entrypoint", "sh", image, "-c", script)
    return {
        Path(path).name: int(size) for size, path in (line.split() for line in out.splitlines())
    }


def main() -> int:
    image = sys.argv[1] if len(sys.argv) > 1 else DEFAULT
    history = layers(image)
    libs = libraries(image)
    twice = sum(size for name, size in libs.items() if name in IN_CUDNN_RUNTIME)
    slim = sum(size for size, _ in history)
    gb = 1e9
    print(f"slim image {image}: {slim / gb:.2f} GB in {len(history)} layers (measured)")
    for size, created in history:
        if size >= 1e6:
            print(f"  {size / gb:6.2f} GB  {created}")
    print("\nCUDA libraries in its venv (nvidia-* wheels, installed size, measured):")
    for name, size in sorted(libs.items(), key=lambda kv: -kv[1]):
        mark = "  also in -cudnn-runtime" if name in IN_CUDNN_RUNTIME else ""
        print(f"  {size / gb:6.3f} GB  {name}{mark}")
    print(
        f"\nnvidia flavor on -cudnn-runtime: carries {twice / gb:.2f} GB of these libraries "
        "twice (computed from the wheels' sizes)\n"
        f"nvidia flavor on -base: saves those {twice / gb:.2f} GB "
        f"({twice / (slim + twice):.0%} of the image), keeps cudart and cuda-compat"
    )
    result = {
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "image": image,
        "slim_layers": [{"bytes": s, "created_by": c} for s, c in history],
        "nvidia_libraries": libs,
        "held_twice_on_cudnn_runtime": twice,
    }
    out = ROOT / "bench" / "results" / "nvidia-base.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
