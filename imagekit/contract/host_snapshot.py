"""The host snapshot as a typed, frozen record: every reading the self-check's verdicts
judge, key by key as docs/host-snapshot.md documents it (a test holds the two to the same
keys).

`HostSnapshot.from_json(data)` refuses a key holding the wrong type, naming its path
(`gpus[0].h2d_gbps: 'fast' is not a number or null`); `to_json()` gives the JSON back as it
was read. A key left out ("not read", as older snapshots leave out the newer readings) reads
as NOT_READ, which is not null: several rules tell the two apart (docs/host-snapshot.md).
A reading is nullable where a reader may write null for one it could not take.
Standard library only (it runs in the image).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from imagekit.contract.checks import CheckResult
from imagekit.contract.records import NOT_READ, Record

FORMAT = 1  # `--judge` refuses another


@dataclass(frozen=True)
class Container(Record):
    device_nodes: list[str] = NOT_READ
    visible_devices: str | None = NOT_READ
    gpus_requested: bool = NOT_READ
    cuda_visible_devices: str | None = NOT_READ
    cuda_device_order: str | None = NOT_READ
    imex_channels: list[str] | None = NOT_READ
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Cpu(Record):
    model: str = NOT_READ
    flags: list[str] = NOT_READ
    implementer: str = NOT_READ
    machine: str = NOT_READ
    emulated: str = NOT_READ
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NumaNode(Record):
    node: int = NOT_READ
    cpus: str = NOT_READ
    memory_mib: int = NOT_READ
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Numa(Record):
    nodes: list[NumaNode] = NOT_READ
    balancing: int | None = NOT_READ
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Torch(Record):
    version: str | None = NOT_READ
    cuda: str | None = NOT_READ
    cuda_available: bool = NOT_READ
    device_count: int = NOT_READ
    arch_list: list[str] = NOT_READ
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Nvml(Record):
    available: bool = NOT_READ
    reason: str = NOT_READ
    driver: str | None = NOT_READ
    device_count: int | None = NOT_READ
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Fabric(Record):
    state: str = NOT_READ
    status: str | None = NOT_READ
    clique_id: int | None = NOT_READ
    cluster_uuid: str | None = NOT_READ
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Memtest(Record):
    bytes: int = NOT_READ
    errors: int = NOT_READ
    seconds: float = NOT_READ
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Soak(Record):
    seconds: float = NOT_READ
    windows: int = NOT_READ
    tflops_first: float | None = NOT_READ
    tflops_min: float | None = NOT_READ
    tflops_steady: float | None = NOT_READ
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Process(Record):
    pid: int = NOT_READ
    used_mib: int | None = NOT_READ
    name: str = NOT_READ
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Gpu(Record):
    """One GPU, by NVML's index: NVML's readings, then the perf probe's measurements."""

    index: int = NOT_READ
    name: str | None = NOT_READ
    uuid: str | None = NOT_READ
    memory_total_mib: int | None = NOT_READ
    compute_capability: str | None = NOT_READ
    compute_mode: str | None = NOT_READ
    persistence_mode: bool | None = NOT_READ
    mig_mode: bool | None = NOT_READ
    ecc_mode: bool | None = NOT_READ
    mig_uuids: list[str] = NOT_READ
    # the counters: a count, or null where it was not read
    ecc_volatile_uncorrected: int | None = NOT_READ
    ecc_aggregate_uncorrected: int | None = NOT_READ
    ecc_sram_uncorrected: int | None = NOT_READ
    ecc_sram_corrected: int | None = NOT_READ
    pcie_replays: int | None = NOT_READ
    pcie_replays_during_run: int | None = NOT_READ
    xid_events: list[int] | None = NOT_READ
    remapped_rows_pending: bool | None = NOT_READ
    remapped_rows_failure: bool | None = NOT_READ
    retired_pages_pending: bool | None = NOT_READ
    # the links
    pcie_gen: int | None = NOT_READ
    pcie_width: int | None = NOT_READ
    pcie_max_gen: int | None = NOT_READ
    pcie_max_width: int | None = NOT_READ
    host_link: str | None = NOT_READ
    numa_node: int | None = NOT_READ
    cpu_affinity: str | None = NOT_READ
    fabric: Fabric | None = NOT_READ
    nvlinks_active: int | None = NOT_READ
    nvlinks_total: int | None = NOT_READ
    nvlink_version: int | None = NOT_READ
    # sampled while the perf probe measured
    clock_event_reasons: list[str] | None = NOT_READ
    clock_event_counts: dict[str, int] = NOT_READ
    clock_samples: int | None = NOT_READ
    power_max_w: float | None = NOT_READ
    temperature_max_c: float | None = NOT_READ
    power_limit_w: float | None = NOT_READ
    power_default_limit_w: float | None = NOT_READ
    temperature_slowdown_c: float | None = NOT_READ
    pcie_gen_under_load: int | None = NOT_READ
    pcie_width_under_load: int | None = NOT_READ
    soak: Soak | None = NOT_READ
    processes: list[Process] | None = NOT_READ
    gpu_lost: str = NOT_READ
    gpu_reset_required: str = NOT_READ
    # the perf probe's measurements
    gemm_bf16_tflops: float | None = NOT_READ
    gemm_dtype: str | None = NOT_READ
    copy_tbps: float | None = NOT_READ
    memtest: Memtest | None = NOT_READ
    h2d_gbps: float | None = NOT_READ
    d2h_gbps: float | None = NOT_READ
    host_copy_cpus: str = NOT_READ
    host_copy_settled: bool | None = NOT_READ
    perf_error: str = NOT_READ
    torch_index: int | None = NOT_READ
    torch_uuid: str | None = NOT_READ
    matched_by: str = NOT_READ
    unread: dict[str, str] = NOT_READ
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PeerCopy(Record):
    src: int | None = NOT_READ
    dst: int | None = NOT_READ
    gbps: float | None = NOT_READ
    torch_src: int | None = NOT_READ
    torch_dst: int | None = NOT_READ
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class HostCopies(Record):
    bytes: int = NOT_READ
    repeat: int = NOT_READ
    pinned: bool = NOT_READ
    alone: bool = NOT_READ
    when: str = NOT_READ
    placed: str = NOT_READ
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SweepPoint(Record):
    bytes: int = NOT_READ
    busbw_gbps: float | None = NOT_READ
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Nccl(Record):
    world_size: int | None = NOT_READ
    busbw_gbps: float | None = NOT_READ
    message_bytes: int | None = NOT_READ
    sweep: list[SweepPoint] = NOT_READ
    checked: bool = NOT_READ
    transport: str | list[str] | None = NOT_READ
    nodes: int = NOT_READ
    net_gbps: float | None = NOT_READ  # never written by a reader: added by hand
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class HostSnapshot(Record):
    """The whole snapshot (docs/host-snapshot.md, "Keys")."""

    format: int = NOT_READ
    imagekit: str = NOT_READ
    taken_at: str | None = NOT_READ
    host: str = NOT_READ
    python: str = NOT_READ
    selected: list[str] = NOT_READ
    require: list[str] = NOT_READ
    labels: dict[str, str] = NOT_READ
    expected_gpus: int | None = NOT_READ
    container: Container = NOT_READ
    cpu: Cpu = NOT_READ
    numa: Numa = NOT_READ
    driver: str | None = NOT_READ
    profile: str | None = NOT_READ
    torch: Torch = NOT_READ
    nvml: Nvml = NOT_READ
    gpus: list[Gpu] = NOT_READ
    p2p: list[PeerCopy] = NOT_READ
    soak_s: float | None = NOT_READ
    run_seconds: int | None = NOT_READ
    host_copies: HostCopies = NOT_READ
    nccl: Nccl = NOT_READ
    checks: dict[str, CheckResult] = NOT_READ
    extra: dict[str, Any] = field(default_factory=dict)
