"""links: peer, host-to-device and NCCL bandwidth judged against the topology's floors, each
piece of evidence by the weakest link it shows, and the transport a profile promises
(transports.py). Pure functions over host snapshots; the readings are real ones from public
reports (each cited where it is used). NCCL's log itself: test_selfcheck_nccl_log.py."""

from __future__ import annotations

from typing import Any

import pytest

from imagekit.contract import transports
from imagekit.contract.checks import Status
from imagekit.contract.host_snapshot import Gpu
from imagekit.selfcheck.verdicts import host_links, link_floors, links

from .conftest import typed

H100 = "NVIDIA H100 80GB HBM3"  # NVML's name of the H100 SXM5


def gpu(index: int, name: str = H100, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "index": index,
        "name": name,
        "compute_capability": "9.0",
        "pcie_gen": 5,
        "pcie_width": 16,
        "pcie_max_gen": 5,
        "pcie_max_width": 16,
        "nvlinks_active": 18,
        "nvlinks_total": 18,
        "nvlink_version": 4,
    }
    base.update(fields)
    return base


def hgx_h100(count: int = 8, **fields: Any) -> list[dict[str, Any]]:
    return [gpu(i, **fields) for i in range(count)]


def pairs(count: int, gbps: float, **slow: float) -> list[dict[str, Any]]:
    """Every ordered pair at `gbps`, except those named like s0d3=120.0."""
    out = []
    for s in range(count):
        for d in range(count):
            if s != d:
                out.append({"src": s, "dst": d, "gbps": slow.get(f"s{s}d{d}", gbps)})
    return out


def levels(findings: list[Any]) -> list[tuple[str, str]]:
    return [(f.level, f.rule) for f in findings]


# -- theoretical figures ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "gbps", "what"),
    [
        ({}, 63.0, "PCIe Gen5 x16"),
        ({"pcie_max_gen": 4, "pcie_gen": 4}, 31.5, "PCIe Gen4 x16"),
        # Idle GPUs train their link down to Gen1 to save power: the max is the capability.
        ({"pcie_gen": 1, "pcie_width": 16}, 63.0, "PCIe Gen5 x16"),
        ({"pcie_max_gen": None, "pcie_max_width": None, "pcie_gen": 3, "pcie_width": 8}, 7.9, ""),
    ],
)
def test_pcie_link_prefers_the_max_generation_and_width(
    fields: dict[str, Any], gbps: float, what: str
) -> None:
    link = link_floors.pcie_link(typed(gpu(0, **fields), Gpu))
    assert link is not None and link.gbps == pytest.approx(gbps, abs=0.1)
    assert not what or link.what == what


@pytest.mark.parametrize(
    ("name", "cc", "active", "version", "gbps"),
    [
        (H100, "9.0", 18, 4, 450.0),  # 18 x 25: the 900 GB/s both ways NVIDIA quotes
        ("NVIDIA A100-SXM4-80GB", "8.0", 12, 3, 300.0),
        ("NVIDIA B200", "10.0", 18, 7, 900.0),
        ("NVIDIA A40", "8.6", 4, 3, 56.24),  # 112.5 GB/s both ways over 4 links
        # No compute capability: the snapshot's nvlink_version, which nvml.py stores as the
        # NVLink generation (NVML's enum converted by its NVLINK_GENERATION).
        ("NVIDIA A100-SXM4-40GB", None, 12, 3, 300.0),  # NVLink 3.0
        (H100, None, 18, 4, 450.0),  # NVLink 4.0
        ("NVIDIA B200", None, 18, 5, 900.0),  # NVLink 5.0: 50 GB/s a link, not halved
        ("Tesla P100-SXM2-16GB", None, 4, 1, 80.0),  # NVLink 1.0: 20 GB/s a link
    ],
)
def test_nvlink_link_rate_by_architecture(
    name: str, cc: str | None, active: int, version: int, gbps: float
) -> None:
    link = link_floors.nvlink_link(
        typed(
            gpu(0, name=name, compute_capability=cc, nvlinks_active=active, nvlink_version=version),
            Gpu,
        )
    )
    assert link is not None and link.gbps == pytest.approx(gbps, abs=0.01)


def test_the_fallback_rate_is_keyed_by_what_nvml_py_stores() -> None:
    from imagekit.selfcheck.readers.nvml_links import NVLINK_GENERATION

    # Every generation nvml.py can store has a rate, and the rate follows the generation:
    # B200's NVML enum 7 (NVLink 5.0) becomes 5, whose rate is 50 GB/s a link.
    known = {generation for generation in NVLINK_GENERATION.values() if generation <= 5}
    assert known <= set(link_floors.NVLINK_GBPS_BY_GENERATION)
    assert link_floors.NVLINK_GBPS_BY_GENERATION[NVLINK_GENERATION[7]] == 50.0
    # NVLink 6 (enum 8): no part's per-link rate in the table yet, so skipped, not guessed.
    assert link_floors.nvlink_rate(typed({"nvlink_version": NVLINK_GENERATION[8]}, Gpu)) is None


def test_no_active_nvlink_is_no_nvlink() -> None:
    assert link_floors.nvlink_link(typed(gpu(0, name="NVIDIA L40S", nvlinks_active=0), Gpu)) is None
    assert link_floors.nvlink_link(typed(gpu(0, nvlinks_active=None), Gpu)) is None


def test_nvswitch_is_known_only_where_it_cannot_be_a_mesh() -> None:
    assert link_floors.on_nvswitch([typed(g, Gpu) for g in hgx_h100(8)])
    # 4 SXM GPUs: a 4-GPU HGX mesh (NV6 per pair) or half an NVSwitch board: unknown.
    assert not link_floors.on_nvswitch([typed(g, Gpu) for g in hgx_h100(4)])
    assert link_floors.on_nvswitch(
        [typed(g, Gpu) for g in hgx_h100(2)], transport="NVLS"
    )  # NVLS needs NVSwitch
    pcie_cards = [gpu(i, name="NVIDIA H100 NVL") for i in range(8)]  # bridged pairs
    assert not link_floors.on_nvswitch([typed(g, Gpu) for g in pcie_cards])


# -- p2p ---------------------------------------------------------------------------------------


def test_hgx_h100_peer_copies_at_nccl_1264s_rates_pass() -> None:
    # 371-376 GB/s unidirectional peer writes on HGX H100 (NVIDIA/nccl#1264).
    snapshot = {"gpus": hgx_h100(), "p2p": pairs(8, 371.0)}
    assert links.p2p_findings(typed(snapshot)) == []
    assert links.check_links(typed(snapshot)).status == "passed"


def test_a_slow_pair_on_nvswitch_fails_naming_the_pair_and_the_floor() -> None:
    snapshot = {"gpus": hgx_h100(), "p2p": pairs(8, 371.0, s2d5=140.0)}
    (finding,) = links.p2p_findings(typed(snapshot))
    assert (finding.level, finding.rule, finding.gpu) == (Status.FAILED, "p2p-bandwidth", 2)
    assert finding.text() == (
        "GPU 2: peer copy to GPU 5 at 140 GB/s, below 270 GB/s (60% of 18 NVLinks x 25 GB/s "
        "= 450 GB/s per direction; https://github.com/NVIDIA/nccl/issues/1264)"
    )


def test_a_4_gpu_mesh_is_judged_by_the_pcie_floor_only_and_says_so() -> None:
    # 4 x H100 with NV6 per pair: ~130 GB/s one way (260.89 both ways, cuda-samples#392).
    snapshot = {"gpus": hgx_h100(4), "p2p": pairs(4, 130.4)}
    assert levels(links.p2p_findings(typed(snapshot))) == [(Status.SKIPPED, "p2p-nvlink")]
    assert links.check_links(typed(snapshot)).status == "passed"  # 12 pairs judged


def test_p2p_over_pcie_slower_than_through_host_memory_fails() -> None:
    # P2P on at 9.9 GB/s while copies through host memory reach 22 (NVIDIA/nccl#814); the
    # GPUs' Gen4 x16 links give 31.5 GB/s per direction, floor 40% = 12.6.
    gpus = [gpu(i, name="NVIDIA A10G", compute_capability="8.6", nvlinks_active=0, pcie_max_gen=4)
            for i in range(2)]  # fmt: skip
    findings = links.p2p_findings(typed({"gpus": gpus, "p2p": pairs(2, 9.9)}))
    assert levels(findings) == [(Status.FAILED, "p2p-bandwidth")] * 2
    assert "below 12.6 GB/s (40% of PCIe Gen4 x16 = 31.5 GB/s" in findings[0].message
    assert links.p2p_findings(typed({"gpus": gpus, "p2p": pairs(2, 22.0)})) == []


@pytest.mark.parametrize(
    ("name", "level"),
    [
        ("NVIDIA H100 80GB HBM3", Status.FAILED),
        ("NVIDIA L4", Status.FAILED),
        ("NVIDIA GeForce RTX 4090", Status.WARNED),
    ],
)
def test_two_or_more_gpus_without_a_peer_pair_is_never_a_pass(name: str, level: Status) -> None:
    """Issue 52: no peer pair on a multi-GPU node sends every copy through host memory."""
    snapshot = {"gpus": [gpu(i, name=name) for i in range(2)], "p2p": []}
    (finding,) = links.p2p_findings(typed(snapshot))
    assert (finding.level, finding.rule) == (level, "p2p-none")
    assert finding.message.startswith("no pair of the 2 GPUs has peer access: P2P is off")


def test_one_gpu_given_to_torch_of_two_is_no_missing_peer() -> None:
    """CUDA_VISIBLE_DEVICES=1 on a two-GPU container: torch measured one GPU (torch_index),
    so there was no pair to have; a MIG device has no peer access at all."""
    one = {"gpus": [gpu(0), gpu(1, torch_index=0)], "p2p": []}
    assert levels(links.p2p_findings(typed(one))) == [(Status.SKIPPED, "p2p")]
    both = {"gpus": [gpu(0, torch_index=0), gpu(1, torch_index=1)], "p2p": []}
    assert levels(links.p2p_findings(typed(both))) == [(Status.FAILED, "p2p-none")]
    mig = {"gpus": [gpu(i, mig_mode=True) for i in range(2)], "p2p": []}
    assert levels(links.p2p_findings(typed(mig))) == [(Status.SKIPPED, "p2p")]


def test_p2p_not_measured_or_not_possible_is_a_skip_never_a_pass() -> None:
    assert levels(links.p2p_findings(typed({"gpus": hgx_h100(1)}))) == [(Status.SKIPPED, "p2p")]
    snapshot = {"gpus": hgx_h100(1), "p2p": []}
    assert levels(links.p2p_findings(typed(snapshot))) == [(Status.SKIPPED, "p2p")]
    assert (
        "no pair of GPUs has peer access: one GPU" in links.p2p_findings(typed(snapshot))[0].message
    )
    unread = [gpu(i, nvlinks_active=None, pcie_max_gen=None, pcie_gen=None) for i in range(2)]
    assert levels(links.p2p_findings(typed({"gpus": unread, "p2p": pairs(2, 20.0)}))) == [
        (Status.SKIPPED, "p2p-pair"),
        (Status.SKIPPED, "p2p-pair"),
    ]
    assert links.check_links(typed({"gpus": unread, "p2p": pairs(2, 20.0)})).status == "skipped"


# -- host copies -------------------------------------------------------------------------------

MEASURED_APART = {
    "host_copies": {"bytes": 2**28, "repeat": 5, "pinned": True, "when": "before-memtest"}
}


@pytest.mark.parametrize(
    ("fields", "level"),
    [
        ({"h2d_gbps": 55.2}, None),  # issue 52's H200 on Gen5 x16, timed alone (0.88)
        ({"h2d_gbps": 47.3}, None),  # the Gen5 floor: 0.75 of 63, just under Azure's 48
        ({"h2d_gbps": 47.2}, Status.FAILED),
        ({"h2d_gbps": 27.6}, Status.FAILED),  # the H200 in the wake of a 118 GiB free (0.44)
        ({"h2d_gbps": 24.0}, Status.FAILED),  # a Gen4 x16 rate on a Gen5 x16 link
        ({"h2d_gbps": 24.6, "pcie_max_gen": 4, "pcie_gen": 4}, None),  # Gen4 x16
        # Gen4 x16: the floor 0.65 of 31.5, just under Azure's 21 GB/s for A100 VMs
        ({"h2d_gbps": 20.5, "pcie_max_gen": 4, "pcie_gen": 4}, None),
        ({"h2d_gbps": 20.4, "pcie_max_gen": 4, "pcie_gen": 4}, Status.FAILED),
        ({"h2d_gbps": 12.0, "pcie_max_width": 8, "pcie_max_gen": 4}, None),  # wired x8
        ({"h2d_gbps": 12.0, "pcie_max_gen": None, "pcie_gen": None}, Status.SKIPPED),
        # NVLink-C2C, judged against it (450 GB/s each way), never PCIe's floor
        ({"name": "NVIDIA GH200 480GB", "h2d_gbps": 346.0}, None),  # nvbandwidth#23's GH200
        ({"name": "NVIDIA GH200 480GB", "h2d_gbps": 52.3}, Status.FAILED),  # a PCIe-like rate
        ({"name": "NVIDIA GH200 480GB", "h2d_gbps": 226.0, "pcie_max_gen": None}, None),
        ({"name": "NVIDIA GB200", "h2d_gbps": 120.0}, None),  # half a Grace's C2C per GPU
        ({"name": "NVIDIA GB200", "h2d_gbps": 100.0}, Status.FAILED),
        ({"name": "NVIDIA H100", "host_link": "c2c", "h2d_gbps": 100.0}, Status.FAILED),  # NVML
        ({"name": "NVIDIA GH200 480GB", "host_link": "pcie", "h2d_gbps": 52.3}, None),  # NVML
        ({}, Status.SKIPPED),  # not measured
    ],
)
def test_h2d_against_the_host_link(fields: dict[str, Any], level: str | None) -> None:
    """Each figure judged the same way in the other direction (device to host)."""
    for key, rule in (("h2d_gbps", "h2d"), ("d2h_gbps", "d2h")):
        other = "d2h_gbps" if key == "h2d_gbps" else "h2d_gbps"
        moved = {key if k == "h2d_gbps" else k: v for k, v in fields.items()}
        one = gpu(3, **moved, **{other: 55.0})
        found = host_links.h2d_findings(typed({"gpus": [one], **MEASURED_APART}))
        mine = [f.level for f in found if f.rule.startswith(rule)]
        assert mine == ([level] if level else []), key


def test_a_snapshot_without_copy_conditions_is_judged_and_told_why_it_may_read_low() -> None:
    """The committed H200 snapshots of 2026-11-26/27 timed the copy in the memory test's wake
    and recorded no conditions: they fail, and the finding says to run the check again."""
    (finding,) = host_links.h2d_findings(typed({"gpus": [gpu(0, h2d_gbps=27.5)]}))
    assert finding.rule == "h2d-bandwidth" and finding.level == Status.FAILED
    assert finding.text().startswith(
        "GPU 0: host-to-device copy at 27.5 GB/s, below 47.3 GB/s (75% of PCIe Gen5 x16 = "
        "63 GB/s per direction;"
    )
    assert finding.text().endswith(
        "measured by a self-check that recorded no copy conditions (before issue 52 it timed "
        "the copy right after its memory test freed the GPU's memory, which halves the figure "
        "on an H200): run the self-check again"
    )
    # such a snapshot has no device-to-host figure, and is not asked for one
    assert host_links.h2d_findings(typed({"gpus": [gpu(0, h2d_gbps=55.2)]})) == []
    (missing,) = host_links.h2d_findings(typed({"gpus": [gpu(0, h2d_gbps=55.2)], **MEASURED_APART}))
    assert (missing.rule, missing.level) == ("d2h", Status.SKIPPED)


def test_copies_whose_batches_never_agreed_say_so() -> None:
    one = gpu(1, h2d_gbps=30.0, d2h_gbps=54.0, host_copy_settled=False, host_copy_cpus="0-55")
    (finding,) = host_links.h2d_findings(typed({"gpus": [one], **MEASURED_APART}))
    assert finding.text().endswith("the far socket; its timed batches never agreed")


def test_copies_from_memory_not_placed_near_the_gpu_say_so() -> None:
    one = gpu(1, h2d_gbps=30.0, d2h_gbps=54.0)
    (finding,) = host_links.h2d_findings(typed({"gpus": [one], **MEASURED_APART}))
    assert finding.text().endswith(
        "the probe's pinned memory was not placed near this GPU (its CPUs unread)"
    )


def test_c2c_failure_names_the_share_of_the_link() -> None:
    (finding,) = host_links.h2d_findings(
        typed({"gpus": [gpu(0, name="NVIDIA GB200", h2d_gbps=60.0)]})
    )
    assert finding.rule == "h2d-bandwidth"
    assert (
        "below 112.5 GB/s (50% of its half of a Grace's NVLink-C2C, 225 GB/s per direction"
        in finding.text()
    )


def test_h2d_failure_names_the_gpu_the_reading_and_the_link() -> None:
    one = gpu(3, h2d_gbps=12.0, d2h_gbps=50.0)
    (finding,) = host_links.h2d_findings(typed({"gpus": [one], **MEASURED_APART}))
    assert finding.text().startswith(
        "GPU 3: host-to-device copy at 12 GB/s, below 47.3 GB/s (75% of PCIe Gen5 x16 = 63 GB/s"
    )
    assert "a downtrained link, a slot wired narrower, the IOMMU in the way" in finding.text()


# -- NCCL --------------------------------------------------------------------------------------


def nccl(**fields: Any) -> dict[str, Any]:
    base = {"world_size": 8, "busbw_gbps": 478.0, "message_bytes": 2**30, "transport": "NVLS"}
    return {**base, **fields}


def test_nccl_on_one_gpu_is_skipped() -> None:
    (finding,) = links.nccl_findings(typed({"gpus": hgx_h100(1), "nccl": nccl(world_size=1)}))
    assert finding.level == Status.SKIPPED and "needs 2 or more GPUs" in finding.message


def test_nvls_all_reduce_on_8_h100_at_nccl_tests_rate_passes() -> None:
    # ~480 GB/s busbw with NVLS on 8 x H100 (NCCL's maintainer, NVIDIA/nccl-tests#212).
    assert links.nccl_findings(typed({"gpus": hgx_h100(), "nccl": nccl()})) == []


def test_slow_nvls_all_reduce_fails_but_a_small_message_only_warns() -> None:
    snapshot = {"gpus": hgx_h100(), "nccl": nccl(busbw_gbps=150.0)}
    (finding,) = links.nccl_findings(typed(snapshot))
    assert (finding.level, finding.rule) == (Status.FAILED, "nccl-busbw")
    assert "all-reduce busbw 150 GB/s over NVLS, below 270 GB/s" in finding.message
    small = {"gpus": hgx_h100(), "nccl": nccl(busbw_gbps=150.0, message_bytes=256 * 2**20)}
    (finding,) = links.nccl_findings(typed(small))
    assert finding.level == Status.WARNED
    assert "the 256 MiB message is below the 512 MiB that bus bandwidth needs" in finding.message


def test_pcie_ring_is_judged_by_the_pcie_floor() -> None:
    gpus = [gpu(i, name="NVIDIA L40S", compute_capability="8.9", nvlinks_active=0,
                pcie_max_gen=4) for i in range(4)]  # fmt: skip
    assert (
        links.nccl_findings(typed({"gpus": gpus, "nccl": nccl(busbw_gbps=19.8, transport="P2P")}))
        == []
    )
    slow = links.nccl_findings(typed({"gpus": gpus, "nccl": nccl(busbw_gbps=6.0, transport="P2P")}))
    assert levels(slow) == [(Status.FAILED, "nccl-busbw")]
    shm = links.nccl_findings(typed({"gpus": gpus, "nccl": nccl(busbw_gbps=7.0, transport="SHM")}))
    assert shm == []  # through host memory: 20% of the link


L40S_X4 = [
    gpu(i, name="NVIDIA L40S", compute_capability="8.9", nvlinks_active=0, pcie_max_gen=4)
    for i in range(4)
]  # Gen4 x16: 31.5 GB/s; P2P floor 40% = 12.6, SHM floor 20% = 6.3


@pytest.mark.parametrize(
    ("gpus", "transport", "busbw", "level", "words"),
    [
        # A ring with P2P and SHM hops runs at its SHM hops' pace: SHM's floor, not P2P's.
        (L40S_X4, "SHM+P2P", 7.0, None, ""),
        (L40S_X4, "P2P", 7.0, Status.FAILED, "over P2P, below 12.6 GB/s"),
        (
            L40S_X4,
            "SHM+P2P",
            6.0,
            Status.FAILED,
            "over SHM+P2P (judged by SHM, the slowest it used)",
        ),
        (L40S_X4, ["P2P", "SHM"], 6.0, Status.FAILED, "below 6.3 GB/s (20% of PCIe Gen4 x16"),
        # NVLS and its rings' P2P hops on NVSwitch: both NVLink's floor.
        (hgx_h100(), "P2P+NVLS", 478.0, None, ""),
        (hgx_h100(), "P2P+NVLS", 150.0, Status.FAILED, "below 270 GB/s (60% of 18 NVLinks"),
        # NVLS proves NVSwitch, so P2P beside it is judged by NVLink, even on 4 GPUs.
        (hgx_h100(4), "P2P+NVLS", 150.0, Status.FAILED, "below 270 GB/s"),
        (hgx_h100(4), "P2P", 150.0, None, ""),  # a 4-GPU mesh or half a board: PCIe floor
        # SHM on an NVSwitch board (P2P off for some pairs): the PCIe link's SHM floor.
        (hgx_h100(), "SHM+P2P", 20.0, None, ""),
        (hgx_h100(), "SHM+P2P", 10.0, Status.FAILED, "judged by SHM"),
    ],
)
def test_a_mixed_ring_is_judged_by_its_slowest_transport(
    gpus: list[dict[str, Any]], transport: Any, busbw: float, level: str | None, words: str
) -> None:
    snapshot = {
        "gpus": gpus,
        "nccl": nccl(world_size=len(gpus), transport=transport, busbw_gbps=busbw),
    }
    found = links.nccl_findings(typed(snapshot))
    assert [f.level for f in found] == ([level] if level else []), found
    assert all(words in f.message for f in found)


def test_a_mixed_ring_with_an_unread_link_is_not_judged() -> None:
    unread = [gpu(i, nvlinks_active=0, pcie_max_gen=None, pcie_gen=None) for i in range(2)]
    snapshot = {"gpus": unread, "nccl": nccl(world_size=2, transport="SHM+P2P", busbw_gbps=1.0)}
    (finding,) = links.nccl_findings(typed(snapshot))
    assert (finding.level, finding.rule) == (Status.SKIPPED, "nccl-busbw")
    assert "PCIe generation and width not read" in finding.message


def test_multi_node_ib_over_socket_fails_with_the_fix() -> None:
    snapshot = {
        "profile": "multi-node-ib",
        "gpus": hgx_h100(),
        "nccl": nccl(world_size=16, nodes=2, transport="Socket", busbw_gbps=11.0),
    }
    found = links.nccl_findings(typed(snapshot))
    assert levels(found) == [(Status.FAILED, "nccl-transport"), (Status.SKIPPED, "nccl-busbw")]
    assert found[0].message == (
        "NCCL used Socket, profile multi-node-ib needs InfiniBand/RDMA (check NCCL_IB_HCA, "
        "the RDMA device plugin, /dev/infiniband)"
    )
    assert links.check_links(typed(snapshot)).status == "failed"


@pytest.mark.parametrize(
    ("profile", "transport", "multi_node", "problem"),
    [
        ("multi-node-ib", "IB", True, ""),
        ("multi-node-ib", "IB+P2P", True, ""),
        ("multi-node-ib", "NVLS", False, ""),  # one node's run of the ddp check: no network
        ("multi-node-ib", None, False, ""),  # one node, not read: nothing was promised there
        # Across nodes no transport read, or only transports within a node, proves no RDMA
        # (changed: an unread transport used to pass as "no evidence").
        ("multi-node-ib", None, True, "NCCL's log shows no connection: nothing proves"),
        ("multi-node-ib", "P2P+SHM", True, "shows only P2P+SHM, no network between the nodes"),
        ("multi-node-ib", "MNNVL+NVLS", True, ""),  # NVLink between nodes (NVL72): no fallback
        # The weakest hop decides: one channel on sockets fails an otherwise IB run.
        ("multi-node-ib", "Socket+IB+P2P", True, "NCCL used Socket, profile multi-node-ib"),
        ("multi-node-ib", ["IB", "Socket"], True, "NCCL used Socket, profile multi-node-ib"),
        ("multi-node-ib", "Libfabric", True, "NCCL used Libfabric"),
        ("multi-node-ethernet", "Socket", True, ""),
        ("multi-node-ethernet", None, True, ""),
        ("single-node", "Socket", False, ""),
    ],
)
def test_transport_rule(profile: str, transport: Any, multi_node: bool, problem: str) -> None:
    found = transports.transport_problem(profile, transport, multi_node)
    assert (problem in found) if problem else found == "", found


def test_multi_node_ib_run_without_a_transport_fails_not_passes() -> None:
    snapshot = {
        "profile": "multi-node-ib",
        "gpus": hgx_h100(),
        "nccl": nccl(world_size=16, nodes=2, transport=None, busbw_gbps=90.0),
    }
    found = links.nccl_findings(typed(snapshot))
    assert levels(found) == [(Status.FAILED, "nccl-transport"), (Status.SKIPPED, "nccl-busbw")]
    assert links.check_links(typed(snapshot)).status == "failed"
    # One node of the same image: nothing to prove between nodes, so not judged either way.
    one = {**snapshot, "nccl": nccl(transport=None)}
    assert levels(links.nccl_findings(typed(one))) == [
        (Status.SKIPPED, "nccl-transport"),
        (Status.SKIPPED, "nccl-busbw"),
    ]


def test_multi_node_busbw_by_profile() -> None:
    ib = {"profile": "multi-node-ib", "gpus": hgx_h100()}
    unknown_rate = nccl(world_size=16, nodes=2, transport="IB", busbw_gbps=90.0)
    (finding,) = links.nccl_findings(typed({**ib, "nccl": unknown_rate}))
    assert finding.level == Status.SKIPPED and "judged by the transport only" in finding.message
    # 8 x 400 Gb/s NDR per node = 400 GB/s; floor 50%.
    rated = nccl(world_size=16, nodes=2, transport="IB", busbw_gbps=90.0, net_gbps=3200)
    assert levels(links.nccl_findings(typed({**ib, "nccl": rated}))) == [
        (Status.FAILED, "nccl-busbw")
    ]
    tcp = {"profile": "multi-node-ethernet", "gpus": hgx_h100()}
    (finding,) = links.nccl_findings(typed({**tcp, "nccl": nccl(nodes=2, transport="Socket")}))
    assert finding.level == Status.SKIPPED and "measured only" in finding.message
    # The network decides between nodes, by its weakest hop: IB with its nodes' P2P hops is
    # judged by IB's floor; one channel on sockets leaves nothing to hold a floor to.
    mixed = nccl(world_size=16, nodes=2, transport="IB+P2P", busbw_gbps=90.0, net_gbps=3200)
    assert levels(links.nccl_findings(typed({**ib, "nccl": mixed}))) == [
        (Status.FAILED, "nccl-busbw")
    ]
    socket = nccl(world_size=16, nodes=2, transport="Socket+IB", busbw_gbps=90.0, net_gbps=3200)
    assert levels(links.nccl_findings(typed({**ib, "nccl": socket}))) == [
        (Status.FAILED, "nccl-transport"),
        (Status.SKIPPED, "nccl-busbw"),
    ]


# -- the check ---------------------------------------------------------------------------------


def test_check_links_lists_every_finding_and_keeps_the_readings() -> None:
    snapshot = {
        "gpus": hgx_h100(8, h2d_gbps=53.0),
        "p2p": pairs(8, 372.0),
        "nccl": nccl(),
    }
    result = links.check_links(typed(snapshot))
    assert result.status == "passed", result
    m = result.measurements
    assert (m["p2p_pairs"], m["nccl_transport"], m["nccl_busbw_GBps"]) == (56, "NVLS", 478.0)
    assert links.check_links(typed({})).status == "skipped"


# -- the ddp check's all-reduce -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("free", "world", "size"),
    [
        (79 * 2**30, 8, 2**30),  # an idle H100: 1 GiB
        (4 * 2**30, 2, 512 * 2**20),  # 4 GiB free: an eighth
        (100 * 2**20, 2, 64 * 2**20),  # almost nothing free: the 64 MiB floor
        (79 * 2**30, 3, 2**30 - 4),  # whole fp32 elements for each of 3 ranks
    ],
)
def test_allreduce_bytes(free: int, world: int, size: int) -> None:
    from imagekit.selfcheck.probes.ddp import allreduce_bytes

    assert allreduce_bytes(free, world) == size
    assert size % (4 * world) == 0


def test_nccl_writes_its_info_log_to_the_ranks_file(tmp_path: Any) -> None:
    from imagekit.selfcheck.probes.ddp import nccl_log_env

    env = nccl_log_env(tmp_path / "rank0.log")
    assert env == {
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,NET",
        "NCCL_DEBUG_FILE": str(tmp_path / "rank0.log"),
    }


def test_the_table_shows_each_host_to_device_figure_and_its_link() -> None:
    result = links.check_links(typed({"gpus": [gpu(3, h2d_gbps=55.2, d2h_gbps=53.1)]}))
    assert result.measurements["figures"] == (
        "GPU 3: host-to-device 55.2 GB/s, device-to-host 53.1 GB/s over PCIe Gen5 x16 (63 GB/s)"
    )


def test_the_table_shows_the_all_reduce_curve() -> None:
    sweep = [{"bytes": 8 << 20, "busbw_gbps": 91.2}, {"bytes": 1 << 30, "busbw_gbps": 371.0}]
    snapshot = {"gpus": hgx_h100(8), "nccl": nccl(busbw_gbps=371.0, sweep=sweep)}
    figures = links.check_links(typed(snapshot)).measurements["figures"]
    assert figures == "all-reduce busbw 8 MiB 91.2, 1024 MiB 371 GB/s"
