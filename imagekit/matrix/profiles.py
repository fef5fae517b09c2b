"""Environment baked into images: allocator, TF32 and NCCL settings by profile.

Thread counts are not baked: the entrypoint computes OMP_NUM_THREADS at container start
from the cgroup CPU quota (a fixed value is wrong on the next host). Everything here is an
ENV default, so `docker run -e` always overrides it.
"""

from __future__ import annotations

from imagekit.contract.checks import ENV_PROFILE

# Transport settings per profile. Single node leaves NCCL to pick (NVLink/PCIe/SHM).
PROFILE_ENV: dict[str, dict[str, str]] = {
    "single-node": {},
    "multi-node-ib": {
        # Bootstrap over a real NIC, data over InfiniBand; NCCL_IB_HCA is site-specific.
        "NCCL_IB_DISABLE": "0",
        "NCCL_SOCKET_IFNAME": "^docker,lo",
    },
    "multi-node-ethernet": {
        "NCCL_IB_DISABLE": "1",
        "NCCL_SOCKET_IFNAME": "^docker,lo",
    },
    # GB200/GB300 NVL72: NVLink between the nodes of a rack, InfiniBand between racks. Set as
    # CoreWeave's GB200 NVL72 nccl-tests job does, "to fail clearly if GB200 is not correctly
    # functioning" rather than fall back to the network (selfcheck/grace.py has the sources).
    "multi-node-nvlink": {
        "NCCL_IB_DISABLE": "0",
        "NCCL_SOCKET_IFNAME": "^docker,lo",
        "NCCL_MNNVL_ENABLE": "1",  # 2 (auto) falls back to IB in silence
        "NCCL_CUMEM_ENABLE": "1",  # fabric memory is shared through cuMem buffers
        "NCCL_NET_GDR_C2C": "1",  # GPUDirect RDMA through the NIC on the Grace, over C2C
        "NVIDIA_IMEX_CHANNELS": "0",  # the container toolkit (1.17+) passes channel 0 in
    },
}

# /dev/shm for launched jobs (`imagekit launch`), as a Kubernetes quantity. DataLoader workers
# hand batches over through it and NCCL's intra-node SHM transport puts its buffers there; a
# container's default 64 MB fails the first large batch with a bus error. Multi-node jobs run on
# whole 8-GPU nodes with several loader workers per rank, hence more. On Kubernetes the memory
# counts against the pod's memory; on Slurm the job checks the node's /dev/shm has this much.
PROFILE_SHM: dict[str, str] = {
    "single-node": "16Gi",
    "multi-node-ib": "64Gi",
    "multi-node-ethernet": "64Gi",
    "multi-node-nvlink": "64Gi",
}

# Profiles whose NCCL data path is RDMA: they need locked memory (IPC_LOCK, memlock unlimited)
# to register buffers with the HCA, and an RDMA device in the container.
RDMA_PROFILES = frozenset({"multi-node-ib", "multi-node-nvlink"})

CUDA_ENV = {
    # Fewer fragmentation OOMs on long training runs.
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True",
    "NVIDIA_VISIBLE_DEVICES": "all",
    "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
}


def tf32_env(enabled: bool) -> dict[str, str]:
    # On: force TF32 for cuBLAS fp32 matmuls. Off: disable it in every NVIDIA library.
    return {"TORCH_ALLOW_TF32_CUBLAS_OVERRIDE": "1"} if enabled else {"NVIDIA_TF32_OVERRIDE": "0"}


def image_env(profile: str, cuda: bool, tf32: bool, require_cuda: str | None) -> dict[str, str]:
    env: dict[str, str] = {ENV_PROFILE: profile}
    if cuda:
        env.update(CUDA_ENV)
        env.update(tf32_env(tf32))
        env.update(PROFILE_ENV[profile])
    if require_cuda:
        env["NVIDIA_REQUIRE_CUDA"] = require_cuda
    return env
