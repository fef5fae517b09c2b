"""Grace hosts (GH200, GB200 NVL72): which GPUs hang off a Grace CPU by NVLink-C2C, which
CPUs are near each GPU, and what multi-node NVLink (MNNVL) needs from NCCL, the container and
the fabric. Pure and standard library only: verdicts over the host snapshot (links.py and
host_links.py ask here), table-tested over recorded snapshots of both
(tests/data/snapshots/gh200.json, gb200-nvl72.json).

The facts, each with its source:
- NVLink-C2C: 900 GB/s in all, 450 GB/s each way, between a Grace and its GPUs (NVIDIA,
  "NVIDIA Grace Hopper Superchip Architecture In-Depth"). A GH200 has one Grace and one
  H100-class GPU; a GB200 superchip one Grace and two Blackwell GPUs, which share it (NVIDIA
  GB200 NVL72 page: "900 GB/s NVLink-C2C" per superchip), so a GB200 GPU is given half.
- A healthy GH200 copies host to device at 346 GB/s (nvbandwidth, copy engine: 0.77 of 450;
  https://github.com/NVIDIA/nvbandwidth/issues/23); the same report's `nvidia-smi topo`
  shows the layout: CPU affinity 0-71, NUMA affinity 0, GPU NUMA ID 1 (the GPU's memory is a
  NUMA node of its own, with no CPU).
- Grace: 72 Arm Neoverse V2 cores, one thread each, one NUMA node per Grace (NVIDIA Grace
  performance tuning guide). A GB200 compute tray has two Graces and four GPUs: ranks 0-1
  belong on NUMA node 0, ranks 2-3 on node 1 (CoreWeave's GB200 NVL72 nccl-tests job,
  https://github.com/coreweave/nccl-tests slurm/nccl-test-distributed-gb200-nvl72-enroot.slurm,
  `--distribution=block:block`).
- MNNVL on GB200 needs NCCL 2.25.2 or later (NVIDIA multi-node NVLink tuning guide, NCCL
  section); NCCL's NCCL_MNNVL_ENABLE defaults to 2, auto (NVIDIA/nccl src/init.cc); fabric
  memory needs cuMem (NCCL_CUMEM_ENABLE=1) and an IMEX channel in the container, without
  which "dependent CUDA APIs fail with an insufficient permission error" (NVIDIA IMEX guide,
  "IMEX Channels"); CoreWeave's job sets NCCL_MNNVL_ENABLE=1, NCCL_CUMEM_ENABLE=1,
  NCCL_NET_GDR_C2C=1 and NVIDIA_IMEX_CHANNELS=0 "to fail clearly if GB200 is not correctly
  functioning". Profile multi-node-nvlink bakes the same (matrix/profiles.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from imagekit.contract.checks import Status
from imagekit.contract.host_snapshot import Container, Fabric, Gpu, HostSnapshot
from imagekit.contract.records import or_default, or_none
from imagekit.selfcheck.verdicts.cpulist import cpus_of
from imagekit.selfcheck.verdicts.findings import Finding, fail, name_of, skip, warn

C2C_GBPS = 450.0  # per direction, between one Grace and its GPUs
C2C_SOURCE = "NVIDIA Grace Hopper Superchip Architecture In-Depth (NVLink-C2C 900 GB/s)"
# Parts whose host link is NVLink-C2C whatever NVML says (a driver too old to answer).
C2C_PARTS = re.compile(r"GH200|GB200|GB300", re.IGNORECASE)
# Blackwell superchips: two GPUs per Grace, so each has half its C2C.
SHARED_C2C_PARTS = re.compile(r"GB200|GB300", re.IGNORECASE)

MNNVL_PROFILE = "multi-node-nvlink"
MNNVL_NCCL = (2, 25, 2)
MNNVL_SOURCE = "NVIDIA multi-node NVLink tuning guide: GB200 MNNVL needs NCCL 2.25.2+"
IMEX_FIX = (
    "the host's nvidia-imex service and its channel (/dev/nvidia-caps-imex-channels/channel0, "
    "made with mknod by the administrator; NVIDIA IMEX guide) passed into the container: "
    "NVIDIA_IMEX_CHANNELS=0 (the profile bakes it) with NVIDIA Container Toolkit 1.17+, or a "
    "ComputeDomain of NVIDIA's DRA driver on Kubernetes"
)


# -- the host link ---------------------------------------------------------------------------


def is_c2c(gpu: Gpu) -> bool:
    """NVML's C2C mode where it was read; else the part's name."""
    link = gpu.host_link
    if link in ("c2c", "pcie"):
        return link == "c2c"
    return bool(C2C_PARTS.search(name_of(gpu)))


def c2c_gbps(gpu: Gpu) -> tuple[float, str]:
    """The GPU's share of its Grace's NVLink-C2C, per direction, and how it was counted."""
    if SHARED_C2C_PARTS.search(name_of(gpu)):
        return C2C_GBPS / 2, "its half of a Grace's NVLink-C2C, 225 GB/s"
    return C2C_GBPS, "NVLink-C2C, 450 GB/s"


# -- CPUs near each GPU ----------------------------------------------------------------------


def cpu_count(cpulist: str) -> int:
    """How many CPUs a Linux cpulist names ("0-71", "0-35,72-107"); ValueError if malformed."""
    return len(cpus_of(cpulist))


def cpus_per_rank(gpus: Sequence[Gpu]) -> dict[int, tuple[str, int]]:
    """Each GPU's nearby CPUs (its cpulist) and that many CPUs divided among the GPUs that share
    them: one rank per GPU gets its share. GPUs whose affinity was not read are left out."""
    sharing: dict[str, int] = {}
    for gpu in gpus:
        if isinstance(gpu.cpu_affinity, str):
            sharing[gpu.cpu_affinity] = sharing.get(gpu.cpu_affinity, 0) + 1
    shares = {}
    for gpu in gpus:
        cpulist = gpu.cpu_affinity
        if isinstance(cpulist, str) and isinstance(gpu.index, int):
            try:
                shares[gpu.index] = (cpulist, cpu_count(cpulist) // sharing[cpulist])
            except ValueError:
                continue
    return shares


def omp_findings(snapshot: HostSnapshot, gpus: Sequence[Gpu]) -> list[Finding]:
    """With one rank per GPU, each rank's OpenMP threads should fit the CPUs near its GPU:
    more spill onto the other Grace of a GB200 tray and reach the GPU across the chip-to-chip
    link. A run with fewer ranks than GPUs is one process over several GPUs: not judged."""
    stack = _measurements(snapshot, "stack")
    shares = cpus_per_rank(gpus)
    if not shares or not any(is_c2c(g) for g in gpus):
        return []
    omp, ranks = stack.get("omp_num_threads"), stack.get("local_ranks")
    if not isinstance(omp, str) or not omp.isdigit() or not isinstance(ranks, int):
        return [skip("omp-near", "OMP_NUM_THREADS or the local ranks not read")]
    if ranks < len(gpus):
        return [skip("omp-near", f"{ranks} local rank(s) for {len(gpus)} GPUs: not judged")]
    return [f for f in (_omp_finding(int(omp), i, s) for i, s in shares.items()) if f]


def _omp_finding(threads: int, index: int, share: tuple[str, int]) -> Finding | None:
    cpulist, allowed = share
    if threads <= allowed:
        return None
    return warn(
        "omp-near",
        f"OMP_NUM_THREADS={threads} per rank, but {allowed} CPUs near this GPU are its rank's "
        f"share of {cpulist}: threads run on the other Grace and reach the GPU over the "
        "chip-to-chip link; leave OMP_NUM_THREADS to imagekit (CPUs / local ranks) and bind "
        "ranks to their GPU's NUMA node (Slurm --distribution=block:block)",
        index,
    )


def layout_figure(gpu: Gpu) -> str:
    """e.g. "GPU 0: NVLink-C2C, CPUs 0-71, memory NUMA node 1"; "" where nothing was read."""
    parts = []
    if is_c2c(gpu):
        parts.append("NVLink-C2C")
    if isinstance(gpu.cpu_affinity, str):
        parts.append(f"CPUs {gpu.cpu_affinity}")
    if isinstance(gpu.numa_node, int):
        parts.append(f"memory NUMA node {gpu.numa_node}")
    return f"GPU {or_none(gpu.index)}: {', '.join(parts)}" if parts else ""


# -- multi-node NVLink -----------------------------------------------------------------------


def mnnvl_findings(snapshot: HostSnapshot, gpus: Sequence[Gpu]) -> tuple[list[Finding], int]:
    """What profile multi-node-nvlink needs on this node: an NCCL that knows MNNVL, neither
    MNNVL nor cuMem turned off, an IMEX channel, and every GPU's fabric registration done.
    With how many of those rules were judged (each not judged is one skip finding)."""
    if snapshot.profile != MNNVL_PROFILE:
        return [], 0
    stack = _measurements(snapshot, "stack")
    rules = [
        [_nccl_version(stack.get("nccl"))],
        _nccl_env(stack.get("nccl_env")),
        [_imex(snapshot.container)],
        *([_fabric(g)] for g in gpus),
    ]
    found = [f for rule in rules for f in rule if f is not None]
    judged = sum(not any(f is not None and f.level == Status.SKIPPED for f in r) for r in rules)
    return found, judged


def nccl_version(text: object) -> tuple[int, ...] | None:
    """(2, 27, 5) from the stack check's "2.27.5"; None where NCCL was not read."""
    if not isinstance(text, str) or not re.fullmatch(r"\d+(\.\d+)*", text):
        return None
    return tuple(int(p) for p in text.split("."))


def _nccl_version(text: object) -> Finding | None:
    version = nccl_version(text)
    if version is None:
        return skip("mnnvl-nccl", f"NCCL's version not read ({text!r})")
    if version >= MNNVL_NCCL:
        return None
    return fail(
        "mnnvl-nccl",
        f"NCCL {text} cannot use multi-node NVLink ({MNNVL_SOURCE}): traffic between the "
        "rack's nodes falls back to the network; build with a torch whose NCCL is newer",
    )


def _nccl_env(env: object) -> list[Finding]:
    if not isinstance(env, dict):
        return [skip("mnnvl-env", "NCCL's environment not read")]
    off = {
        "NCCL_MNNVL_ENABLE": "turns multi-node NVLink off",
        "NCCL_CUMEM_ENABLE": "turns off the cuMem buffers that fabric memory is shared through",
    }
    return [
        fail("mnnvl-env", f"{name}=0 {why}: unset it (profile {MNNVL_PROFILE} bakes 1)")
        for name, why in off.items()
        if str(env.get(name, "")).strip() == "0"
    ]


def _imex(container: Container) -> Finding | None:
    channels = container.imex_channels if container else None
    if not isinstance(channels, list):
        return skip("mnnvl-imex", "the container's IMEX channels not read")
    if channels:
        return None
    return fail(
        "mnnvl-imex",
        "no IMEX channel in the container: CUDA cannot share memory over the NVLink fabric, "
        f"so NCCL cannot use multi-node NVLink; needs {IMEX_FIX}",
    )


def _fabric(gpu: Gpu) -> Finding | None:
    fabric, index = gpu.fabric, or_none(gpu.index)
    if not isinstance(fabric, Fabric):
        return skip("mnnvl-fabric", "NVLink fabric state not read", index)
    state, status = or_none(fabric.state), or_default(fabric.status, "success")
    if state == "not_supported":
        return fail(
            "mnnvl-fabric",
            f"not part of an NVLink fabric: profile {MNNVL_PROFILE} is for GB200/GB300 "
            "NVL72-class racks; use multi-node-ib elsewhere",
            index,
        )
    if state != "completed" or status != "success":
        return fail(
            "mnnvl-fabric",
            f"NVLink fabric registration {state} (status: {status}): the GPU cannot reach the "
            "rack's other nodes over NVLink; check the NVLink switch trays and "
            "`nvidia-smi -q | grep -A4 Fabric` on the host",
            index,
        )
    return None


def _measurements(snapshot: HostSnapshot, check: str) -> Mapping[str, Any]:
    """The measurements a probe recorded: the snapshot keeps them as the probe wrote them."""
    result = (snapshot.checks or {}).get(check)
    return result.measurements if result else {}
