"""stack: versions against the image's labels, the environment, and whether torch really
uses the GPU the container has (a CUDA image on a GPU host that runs on the CPU fails)."""

from __future__ import annotations

import os
import warnings
from typing import Any

from imagekit.contract import driver
from imagekit.contract import labels as label
from imagekit.contract.archs import arch_verdict
from imagekit.contract.cgroup import cgroup_quota
from imagekit.contract.checks import CheckResult, verdict
from imagekit.selfcheck.readers import container
from imagekit.selfcheck.readers.promises import labels
from imagekit.selfcheck.verdicts import devices
from imagekit.selfcheck.verdicts.rules import omp_problem


def check_stack() -> CheckResult:
    import torch

    promise = labels()
    m: dict[str, Any] = {"torch": torch.__version__, "torch_cuda": torch.version.cuda}
    problems = _promises(torch, promise)
    problems += _environment(torch, m)
    host = container.read_container()
    cuda_image = devices.is_cuda_image(promise, torch.version.cuda)
    m["gpu_expected"] = devices.gpu_expected(host, cuda_image)
    m["nvidia_devices"] = list(host.device_nodes)
    available, why_not = _cuda_available(torch)
    m["device"] = "cuda" if available else "cpu"
    if available:
        problems += _gpu_stack(torch, promise, m)
    elif m["gpu_expected"]:
        need = driver.min_driver(promise, torch.version.cuda)
        m["driver"] = host.driver
        problems.append(
            "a CUDA image on a GPU host, but torch runs on the CPU: "
            + devices.no_gpu_cause(host, need, torch.version.cuda, why_not)
        )
    return verdict(problems, **m)


def _promises(torch: Any, promise: dict[str, str]) -> list[str]:
    problems = []
    base = torch.__version__.split("+")[0]
    if promise.get(label.TORCH) and promise[label.TORCH] != base:
        problems.append(
            f"label {label.TORCH} promises torch {promise[label.TORCH]}, the image has torch {base}"
        )
    want_cuda = promise.get(label.CUDA)
    have_cuda = ".".join((torch.version.cuda or "cpu").split(".")[:2])
    if want_cuda and want_cuda != have_cuda:
        problems.append(
            f"label {label.CUDA} promises CUDA {want_cuda}, torch was built for {have_cuda}"
        )
    return problems


def _cuda_available(torch: Any) -> tuple[bool, str]:
    """torch.cuda.is_available(), and when False, what torch says about why."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if torch.cuda.is_available():
            return True, ""
    said = " ".join(str(w.message) for w in caught)
    if torch.version.cuda:
        try:
            torch.cuda.init()
        except Exception as exc:  # the driver's own words: too old, not found, ...
            said = f"{said} {exc}".strip()
    return False, said[:400]


def _environment(torch: Any, m: dict[str, Any]) -> list[str]:
    shm = os.statvfs("/dev/shm")
    m["shm_bytes"] = shm.f_blocks * shm.f_frsize
    m["omp_num_threads"] = os.environ.get("OMP_NUM_THREADS")
    m["local_ranks"] = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    m["torch_threads"] = torch.get_num_threads()
    m["cpus_visible"] = len(os.sched_getaffinity(0))
    m["cgroup_cpus"] = cgroup_quota()
    m["nccl_env"] = {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")}
    m["tf32_env"] = {
        k: os.environ[k]
        for k in ("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "NVIDIA_TF32_OVERRIDE")
        if k in os.environ
    }
    if m["shm_bytes"] < 1 << 30:
        m["warning"] = (
            f"/dev/shm is {m['shm_bytes'] >> 20} MiB: NCCL and DataLoader workers "
            "need GBs; run with --ipc=host or --shm-size=8g"
        )
    cpus = min(filter(None, [m["cgroup_cpus"], float(m["cpus_visible"])]), default=None)
    problem = omp_problem(m["omp_num_threads"], m["local_ranks"], cpus)
    return [problem] if problem else []


def _gpu_stack(torch: Any, promise: dict[str, str], m: dict[str, Any]) -> list[str]:
    problems = []
    capability = torch.cuda.get_device_capability()
    props = torch.cuda.get_device_properties(0)
    m.update(
        gpu=torch.cuda.get_device_name(),
        gpus=torch.cuda.device_count(),
        gpu_memory_bytes=props.total_memory,
        arch=f"sm_{capability[0]}{capability[1]}",
        arch_list=torch.cuda.get_arch_list(),
        cudnn=torch.backends.cudnn.version(),
        driver=driver.read_driver(),
    )
    try:
        m["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception as exc:  # torch without NCCL (e.g. some builds): report, do not fail
        m["nccl"] = f"unavailable ({exc})"
    archs = arch_verdict(tuple(capability), m["arch_list"])
    m["arch_served_by"] = archs.via
    if not archs.runs:
        problems.append(archs.reason)
    elif archs.jit:
        m["note"] = archs.reason
    need = driver.min_driver(promise, torch.version.cuda)
    forward = os.environ.get("IMAGEKIT_FORWARD_COMPAT") or None
    if forward:
        m["forward_compat"] = forward
    too_old = driver.driver_problem(m["driver"], need, torch.version.cuda, forward)
    if too_old:
        problems.append(too_old)
    return problems
