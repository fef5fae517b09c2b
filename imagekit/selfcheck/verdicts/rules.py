"""The self-check's decisions, as pure functions over plain data (tested without torch or a GPU).

Each check gathers numbers and names with thin torch/onnxruntime calls, then asks one of
these whether that is healthy, so every branch a GPU would take is table-tested here.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from imagekit.contract.tolerances import ATTENTION_MATH_FACTOR, ATTENTION_ULPS, CHECKPOINT_GRAD_RTOL

TRT = "TensorrtExecutionProvider"
CUDA = "CUDAExecutionProvider"
CPU = "CPUExecutionProvider"

# -- onnxruntime providers ----------------------------------------------------------------


def providers_to_ask(available: Sequence[str], want_tensorrt: bool) -> list[str]:
    """Best first, as onnxruntime expects; TensorRT only when it is to be proven (its engine
    build takes seconds, and a failed load falls back silently)."""
    order = ([TRT] if want_tensorrt else []) + [CUDA, CPU]
    return [p for p in order if p in available]


@dataclass(frozen=True)
class ProviderVerdict:
    ok: bool
    reason: str


def provider_verdict(
    gpu: bool,
    available: Sequence[str],
    session: Sequence[str],
    promised_gpu: bool,
    want_tensorrt: bool,
    load_errors: str = "",
) -> ProviderVerdict:
    """Did inference really run where it should? `session` is session.get_providers(), what
    ORT really created: it drops a provider that fails to load and says so only in its log.

    On a GPU, an onnxruntime-gpu build must run CUDA (and TensorRT where promised). A CPU-only
    onnxruntime on a GPU host fails when the image promised GPU inference, else passes with
    a note. Without a GPU, the CPU provider is the right one."""
    errors = f"; onnxruntime logged: {load_errors}" if load_errors else ""
    listed = f"session providers {list(session)}, available {list(available)}"
    if not gpu:
        return ProviderVerdict(True, "no GPU: the CPU provider is the one to prove")
    if CUDA not in available and TRT not in available:
        if promised_gpu:
            return ProviderVerdict(
                False,
                "this onnxruntime is a CPU-only build on a GPU host, and the image promises "
                f"GPU inference (install onnxruntime-gpu); {listed}",
            )
        return ProviderVerdict(True, "onnxruntime is a CPU-only build: GPU inference not proven")
    if want_tensorrt and TRT not in session:
        return ProviderVerdict(
            False, f"TensorRT was asked for but did not load (ORT fell back); {listed}{errors}"
        )
    if CUDA not in session and TRT not in session:
        return ProviderVerdict(
            False, f"onnxruntime-gpu fell back to the CPU on a GPU host; {listed}{errors}"
        )
    return ProviderVerdict(True, "")


_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def provider_errors(log: str, limit: int = 3) -> str:
    """The lines of ORT's own log that say why a provider did not load (colour codes off)."""
    keys = ("error", "failed", "cannot", "could not", "not found")
    plain = _ANSI.sub("", log)
    lines = [ln.strip() for ln in plain.splitlines() if any(k in ln.lower() for k in keys)]
    return " | ".join(lines[:limit])


# -- numerics -----------------------------------------------------------------------------

# Machine epsilon of the dtypes the checks use (IEEE and bfloat16 definitions).
EPS = {"float32": 2.0**-23, "bfloat16": 2.0**-7, "float16": 2.0**-10}


def attention_close(error: float, math_error: float, dtype: str) -> tuple[bool, float]:
    """A fused attention kernel vs a float64 reference: healthy when its error is within a few
    times what the math kernel itself makes in the same dtype, plus a few ulps. A fixed atol
    fails healthy GPUs on long sequences, where the low-precision error grows for every
    kernel; a broken kernel is off by the size of the values themselves."""
    limit = ATTENTION_MATH_FACTOR * math_error + ATTENTION_ULPS * EPS[dtype]
    return (math.isfinite(error) and error <= limit), limit


def relative_error(max_abs_diff: float, reference_max_abs: float) -> float:
    return max_abs_diff / max(reference_max_abs, 1e-12)


def gradients_match(
    max_diff: float, reference_max_abs: float, rtol: float = CHECKPOINT_GRAD_RTOL
) -> bool:
    return max_diff <= rtol * max(reference_max_abs, 1.0)


def differs(error: float, tolerance: float) -> bool:
    """An output (or a gradient across ranks) is off by more than its tolerance
    (contract/tolerances.py). NaN or infinity is off too: `nan > tol` is False, and a
    kernel that returns NaN must not pass."""
    return not error <= tolerance


# -- distributed --------------------------------------------------------------------------


@dataclass(frozen=True)
class DdpRun:
    backend: str
    world_size: int
    why: str


def ddp_runs(gpus: int) -> list[DdpRun]:
    """Always the 2-rank gloo logic test; on a GPU host also NCCL with one rank per GPU
    (world size 1 is valid: it still loads NCCL and runs its kernels)."""
    runs = [DdpRun("gloo", 2, "two CPU ranks: gradient sync logic")]
    if gpus >= 1:
        runs.append(DdpRun("nccl", gpus, f"one rank per GPU ({gpus}): NCCL itself"))
    return runs


def launched_by_torchrun(env: Mapping[str, str]) -> bool:
    """Join an outside process group only when torchrun started this on purpose. RANK and
    WORLD_SIZE alone are often set by a scheduler for the training job the image is for."""
    return bool(env.get("TORCHELASTIC_RUN_ID")) and "RANK" in env and "WORLD_SIZE" in env


def omp_problem(omp: str | None, local_ranks: int, cpus: float | None) -> str | None:
    """OMP_NUM_THREADS x the ranks on this node must fit in the CPUs the container may use."""
    if not omp or not cpus:
        return None
    try:
        threads = int(omp)
    except ValueError:
        return f"OMP_NUM_THREADS={omp!r} is not a number"
    allowed = max(1, math.floor(cpus))
    if threads * max(1, local_ranks) <= allowed:
        return None
    ranks = f" x {local_ranks} local ranks" if local_ranks > 1 else ""
    return f"OMP_NUM_THREADS={threads}{ranks} exceeds the {cpus:g} CPUs this container may use"


# -- torch.compile ------------------------------------------------------------------------


def compile_hint(error: str) -> str:
    """What a torch.compile failure most often means in a container."""
    text = error.lower()
    if "python.h" in text:
        return "the image lacks the Python headers (python3-dev) inductor and Triton compile with"
    compiler_words = ("c compiler", "c++ compiler", "invalidcxxcompiler", "cc1plus", "g++", "gcc")
    if any(w in text for w in compiler_words):
        return (
            "the image has no working C/C++ compiler, which inductor (CPU) and Triton (GPU) "
            "need at run time; keep the cell's compile support on (compile: true)"
        )
    return ""
