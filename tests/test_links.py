"""links: peer, host-to-device and NCCL bandwidth judged against the topology's floors, and
NCCL's transport read from its own log. Pure functions over host snapshots; the readings
are real ones from public reports (each cited where it is used)."""

from __future__ import annotations

from typing import Any

import pytest

from imagekit.selfcheck import links
from imagekit.selfcheck.findings import FAIL, SKIP, WARN

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
    link = links.pcie_link(gpu(0, **fields))
    assert link is not None and link.gbps == pytest.approx(gbps, abs=0.1)
    assert not what or link.what == what


@pytest.mark.parametrize(
    ("name", "cc", "active", "version", "gbps"),
    [
        (H100, "9.0", 18, 4, 450.0),  # 18 x 25: the 900 GB/s both ways NVIDIA quotes
        ("NVIDIA A100-SXM4-80GB", "8.0", 12, 3, 300.0),
        ("NVIDIA B200", "10.0", 18, 7, 900.0),
        ("NVIDIA A40", "8.6", 4, 3, 56.24),  # 112.5 GB/s both ways over 4 links
        # H100 read by a newer NVML (enum 6 = NVLink 4.0): the architecture decides.
        (H100, "9.0", 18, 6, 450.0),
        # No compute capability: the version enum, where both encodings agree.
        ("NVIDIA A100-SXM4-40GB", None, 12, 4, 300.0),
    ],
)
def test_nvlink_link_rate_by_architecture(
    name: str, cc: str | None, active: int, version: int, gbps: float
) -> None:
    link = links.nvlink_link(
        gpu(0, name=name, compute_capability=cc, nvlinks_active=active, nvlink_version=version)
    )
    assert link is not None and link.gbps == pytest.approx(gbps, abs=0.01)


def test_no_active_nvlink_is_no_nvlink() -> None:
    assert links.nvlink_link(gpu(0, name="NVIDIA L40S", nvlinks_active=0)) is None
    assert links.nvlink_link(gpu(0, nvlinks_active=None)) is None


def test_nvswitch_is_known_only_where_it_cannot_be_a_mesh() -> None:
    assert links.on_nvswitch(hgx_h100(8))
    # 4 SXM GPUs: a 4-GPU HGX mesh (NV6 per pair) or half an NVSwitch board: unknown.
    assert not links.on_nvswitch(hgx_h100(4))
    assert links.on_nvswitch(hgx_h100(2), transport="NVLS")  # NVLS needs NVSwitch
    pcie_cards = [gpu(i, name="NVIDIA H100 NVL") for i in range(8)]  # bridged pairs
    assert not links.on_nvswitch(pcie_cards)


# -- p2p ---------------------------------------------------------------------------------------


def test_hgx_h100_peer_copies_at_nccl_1264s_rates_pass() -> None:
    # 371-376 GB/s unidirectional peer writes on HGX H100 (NVIDIA/nccl#1264).
    snapshot = {"gpus": hgx_h100(), "p2p": pairs(8, 371.0)}
    assert links.p2p_findings(snapshot) == []
    assert links.check_links(snapshot)["status"] == "passed"


def test_a_slow_pair_on_nvswitch_fails_naming_the_pair_and_the_floor() -> None:
    snapshot = {"gpus": hgx_h100(), "p2p": pairs(8, 371.0, s2d5=140.0)}
    (finding,) = links.p2p_findings(snapshot)
    assert (finding.level, finding.rule, finding.gpu) == (FAIL, "p2p-bandwidth", 2)
    assert finding.text() == (
        "GPU 2: peer copy to GPU 5 at 140 GB/s, below 270 GB/s (60% of 18 NVLinks x 25 GB/s "
        "= 450 GB/s per direction; https://github.com/NVIDIA/nccl/issues/1264)"
    )


def test_a_4_gpu_mesh_is_judged_by_the_pcie_floor_only_and_says_so() -> None:
    # 4 x H100 with NV6 per pair: ~130 GB/s one way (260.89 both ways, cuda-samples#392).
    snapshot = {"gpus": hgx_h100(4), "p2p": pairs(4, 130.4)}
    assert levels(links.p2p_findings(snapshot)) == [(SKIP, "p2p-nvlink")]
    assert links.check_links(snapshot)["status"] == "passed"  # 12 pairs judged


def test_p2p_over_pcie_slower_than_through_host_memory_fails() -> None:
    # P2P on at 9.9 GB/s while copies through host memory reach 22 (NVIDIA/nccl#814); the
    # GPUs' Gen4 x16 links give 31.5 GB/s per direction, floor 40% = 12.6.
    gpus = [gpu(i, name="NVIDIA A10G", compute_capability="8.6", nvlinks_active=0, pcie_max_gen=4)
            for i in range(2)]  # fmt: skip
    findings = links.p2p_findings({"gpus": gpus, "p2p": pairs(2, 9.9)})
    assert levels(findings) == [(FAIL, "p2p-bandwidth")] * 2
    assert "below 12.6 GB/s (40% of PCIe Gen4 x16 = 31.5 GB/s" in findings[0].message
    assert links.p2p_findings({"gpus": gpus, "p2p": pairs(2, 22.0)}) == []


def test_p2p_not_measured_or_not_possible_is_a_skip_never_a_pass() -> None:
    assert levels(links.p2p_findings({"gpus": hgx_h100(1)})) == [(SKIP, "p2p")]
    snapshot = {"gpus": hgx_h100(1), "p2p": []}
    assert "no pair of GPUs has peer access" in links.p2p_findings(snapshot)[0].message
    unread = [gpu(i, nvlinks_active=None, pcie_max_gen=None, pcie_gen=None) for i in range(2)]
    assert levels(links.p2p_findings({"gpus": unread, "p2p": pairs(2, 20.0)})) == [
        (SKIP, "p2p-pair"),
        (SKIP, "p2p-pair"),
    ]
    assert links.check_links({"gpus": unread, "p2p": pairs(2, 20.0)})["status"] == "skipped"


# -- h2d ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "level"),
    [
        ({"h2d_gbps": 52.3}, None),  # H100 SXM on Gen5 x16
        ({"h2d_gbps": 12.0}, FAIL),  # the same GPU at a Gen3 x16-like rate
        ({"h2d_gbps": 24.6, "pcie_max_gen": 4, "pcie_gen": 4}, None),  # Gen4 x16
        ({"h2d_gbps": 12.0, "pcie_max_width": 8, "pcie_max_gen": 4}, None),  # wired x8
        ({"h2d_gbps": 12.0, "pcie_max_gen": None, "pcie_gen": None}, SKIP),
        ({"name": "NVIDIA GH200 480GB", "h2d_gbps": 12.0}, SKIP),  # NVLink-C2C, not PCIe
        ({}, SKIP),  # not measured
    ],
)
def test_h2d_against_the_pcie_link(fields: dict[str, Any], level: str | None) -> None:
    found = links.h2d_findings({"gpus": [gpu(3, **fields)]})
    assert [f.level for f in found] == ([level] if level else [])


def test_h2d_failure_names_the_gpu_the_reading_and_the_link() -> None:
    (finding,) = links.h2d_findings({"gpus": [gpu(3, h2d_gbps=12.0)]})
    assert finding.text().startswith(
        "GPU 3: host-to-device copy at 12 GB/s, below 31.5 GB/s (50% of PCIe Gen5 x16 = 63 GB/s"
    )


# -- NCCL --------------------------------------------------------------------------------------


def nccl(**fields: Any) -> dict[str, Any]:
    base = {"world_size": 8, "busbw_gbps": 478.0, "message_bytes": 2**30, "transport": "NVLS"}
    return {**base, **fields}


def test_nccl_on_one_gpu_is_skipped() -> None:
    (finding,) = links.nccl_findings({"gpus": hgx_h100(1), "nccl": nccl(world_size=1)})
    assert finding.level == SKIP and "needs 2 or more GPUs" in finding.message


def test_nvls_all_reduce_on_8_h100_at_nccl_tests_rate_passes() -> None:
    # ~480 GB/s busbw with NVLS on 8 x H100 (NCCL's maintainer, NVIDIA/nccl-tests#212).
    assert links.nccl_findings({"gpus": hgx_h100(), "nccl": nccl()}) == []


def test_slow_nvls_all_reduce_fails_but_a_small_message_only_warns() -> None:
    snapshot = {"gpus": hgx_h100(), "nccl": nccl(busbw_gbps=150.0)}
    (finding,) = links.nccl_findings(snapshot)
    assert (finding.level, finding.rule) == (FAIL, "nccl-busbw")
    assert "all-reduce busbw 150 GB/s over NVLS, below 270 GB/s" in finding.message
    small = {"gpus": hgx_h100(), "nccl": nccl(busbw_gbps=150.0, message_bytes=256 * 2**20)}
    (finding,) = links.nccl_findings(small)
    assert finding.level == WARN
    assert "the 256 MiB message is below the 512 MiB that bus bandwidth needs" in finding.message


def test_pcie_ring_is_judged_by_the_pcie_floor() -> None:
    gpus = [gpu(i, name="NVIDIA L40S", compute_capability="8.9", nvlinks_active=0,
                pcie_max_gen=4) for i in range(4)]  # fmt: skip
    assert links.nccl_findings({"gpus": gpus, "nccl": nccl(busbw_gbps=19.8, transport="P2P")}) == []
    slow = links.nccl_findings({"gpus": gpus, "nccl": nccl(busbw_gbps=6.0, transport="P2P")})
    assert levels(slow) == [(FAIL, "nccl-busbw")]
    shm = links.nccl_findings({"gpus": gpus, "nccl": nccl(busbw_gbps=7.0, transport="SHM")})
    assert shm == []  # through host memory: 20% of the link


def test_multi_node_ib_over_socket_fails_with_the_fix() -> None:
    snapshot = {
        "profile": "multi-node-ib",
        "gpus": hgx_h100(),
        "nccl": nccl(world_size=16, nodes=2, transport="Socket", busbw_gbps=11.0),
    }
    found = links.nccl_findings(snapshot)
    assert levels(found) == [(FAIL, "nccl-transport"), (SKIP, "nccl-busbw")]
    assert found[0].message == (
        "NCCL used Socket, profile multi-node-ib needs InfiniBand/RDMA (check NCCL_IB_HCA, "
        "the RDMA device plugin, /dev/infiniband)"
    )
    assert links.check_links(snapshot)["status"] == "failed"


@pytest.mark.parametrize(
    ("profile", "transport", "problem"),
    [
        ("multi-node-ib", "IB", False),
        ("multi-node-ib", "NVLS", False),  # one node's run of the ddp check: no network used
        ("multi-node-ib", None, False),  # not read: no evidence
        ("multi-node-ib", "Libfabric", True),
        ("multi-node-ethernet", "Socket", False),
        ("single-node", "Socket", False),
    ],
)
def test_transport_rule(profile: str, transport: str | None, problem: bool) -> None:
    assert bool(links.transport_problem(profile, transport)) is problem


def test_multi_node_busbw_by_profile() -> None:
    ib = {"profile": "multi-node-ib", "gpus": hgx_h100()}
    unknown_rate = nccl(world_size=16, nodes=2, transport="IB", busbw_gbps=90.0)
    (finding,) = links.nccl_findings({**ib, "nccl": unknown_rate})
    assert finding.level == SKIP and "judged by the transport only" in finding.message
    # 8 x 400 Gb/s NDR per node = 400 GB/s; floor 50%.
    rated = nccl(world_size=16, nodes=2, transport="IB", busbw_gbps=90.0, net_gbps=3200)
    assert levels(links.nccl_findings({**ib, "nccl": rated})) == [(FAIL, "nccl-busbw")]
    tcp = {"profile": "multi-node-ethernet", "gpus": hgx_h100()}
    (finding,) = links.nccl_findings({**tcp, "nccl": nccl(nodes=2, transport="Socket")})
    assert finding.level == SKIP and "measured only" in finding.message


# -- NCCL's log --------------------------------------------------------------------------------

# Lines as NCCL_DEBUG=INFO writes them, from public reports (hosts shortened where long).
SINGLE_NODE_NVLS = """\
node:5668:5722 [5] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB [RO]; OOB eth0:10.0.0.1<0>
node:5668:5722 [5] NCCL INFO Using network IB
node:5668:5722 [5] NCCL INFO NVLS multicast support is available on dev 5
node:5666:5808 [3] NCCL INFO Channel 07/0 : 3[3] -> 4[4] via P2P/CUMEM
"""  # NVIDIA/nccl#1538 (8 GPUs, one node: NCCL names IB but every peer is local)
H800_NO_NVLS = """\
036260b61d3a:33347:33367 [7] NCCL INFO Channel 15/0 : 7[7] -> 4[4] via P2P/direct pointer
036260b61d3a:33347:33366 [6] NCCL INFO 16 coll channels, 0 nvls channels, 16 p2p channels, 16 p2p channels per peer
"""  # NVIDIA/nccl#892
IB_GDR = """\
H20-GPU-06:4015539:4015652 [0] NCCL INFO Channel 07/0 : 0[0] -> 2[0] [receive] via NET/IB/3/GDRDMA
H20-GPU-06:4015540:4015653 [1] NCCL INFO Channel 00/0 : 3[1] -> 2[0] via P2P/CUMEM
"""  # NVIDIA/nccl#1189
IBEXT = """\
bigo:1884:2298 [0] NCCL INFO NET/IB : Using [0]={[0] mlx5_2:1/RoCE, [1] mlx5_3:1/RoCE} [RO]; OOB bond0.526:169.136.106.9<0>
bigo:1884:2298 [0] NCCL INFO Using network IBext_v8
bigo:1884:2298 [0] NCCL INFO Channel 00/0 : 1[0] -> 2[0] [receive] via NET/IBext_v8/1
"""  # NVIDIA/nccl-tests#373
SOCKET = """\
user:852750:852802 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.
user:852750:852802 [0] NCCL INFO NET/Socket : Using [0]ibs85f0:192.168.1.14<0> [1]ib0:192.168.1.15<0>
user:852750:852802 [0] NCCL INFO Using network Socket
ubuntu:9621:9692 [7] NCCL INFO Channel 14/0 : 15[7] -> 0[0] [send] via NET/Socket/0
ubuntu:39964:40050 [6] NCCL INFO Channel 09 : 6[6] -> 7[7] via SHM/direct/direct
"""  # NVIDIA/nccl-tests#188 and #166
SHM = """\
tj5-sc-ai-h800r-dev01:533:1765 [2] NCCL INFO Channel 07 : 2[6] -> 3[7] via SHM/direct/direct
"""  # NVIDIA/nccl#1609
NVLS_COMM = """\
h100clust-worker-1:227602:227792 [0] NCCL INFO NVLS comm 0x5639e9f0e8c0 headRank 0 nHeads 8 buffSize 1048576 nvlsPerRankSize 33554432 nvlsTotalSize 268435456
h100clust-worker-1:227602:227792 [0] NCCL INFO Channel 02/0 : 1[1] -> 0[0] via P2P/CUMEM/read
"""  # NVIDIA/nccl#1453 (the NET lines of that 2-node run left out)
IPC = "node:798:813 [3] NCCL INFO Channel 02/0 : 3[3] -> 4[4] via P2P/IPC\n"
NO_CHANNELS = "node:1:1 [0] NCCL INFO Using network Socket\nNCCL version 2.21.5+cuda12.4\n"


@pytest.mark.parametrize(
    ("log", "transport"),
    [
        (SINGLE_NODE_NVLS, "NVLS"),
        (H800_NO_NVLS, "P2P"),  # multicast not available: 0 nvls channels
        (IB_GDR, "IB"),
        (IBEXT, "IB"),  # HPC-X's IB plugin, on RoCE
        (SOCKET, "Socket"),
        (SHM, "SHM"),
        (NVLS_COMM, "NVLS"),
        (IPC, "P2P"),
        (NO_CHANNELS, None),  # "Using network" alone: no connection was made
        ("", None),
    ],
)
def test_transport_from_log(log: str, transport: str | None) -> None:
    assert links.transport_from_log(log) == transport


# -- the check ---------------------------------------------------------------------------------


def test_check_links_lists_every_finding_and_keeps_the_readings() -> None:
    snapshot = {
        "gpus": hgx_h100(8, h2d_gbps=53.0),
        "p2p": pairs(8, 372.0),
        "nccl": nccl(),
    }
    result = links.check_links(snapshot)
    assert result["status"] == "passed", result
    m = result["measurements"]
    assert (m["p2p_pairs"], m["nccl_transport"], m["nccl_busbw_GBps"]) == (56, "NVLS", 478.0)
    assert links.check_links({})["status"] == "skipped"


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
    from imagekit.selfcheck.ddp import allreduce_bytes

    assert allreduce_bytes(free, world) == size
    assert size % (4 * world) == 0


def test_nccl_writes_its_info_log_to_the_ranks_file(tmp_path: Any) -> None:
    from imagekit.selfcheck.ddp import nccl_log_env

    env = nccl_log_env(tmp_path / "rank0.log")
    assert env == {
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,NET",
        "NCCL_DEBUG_FILE": str(tmp_path / "rank0.log"),
    }
