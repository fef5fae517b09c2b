"""The host readings of a Grace host outside NVML: the cpulist form of NVML's CPU affinity
masks, the NUMA layout from /sys and /proc, and the container's IMEX channels, each read from
a fake tree (a GH200 and a GB200 compute tray)."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.selfcheck.readers import container, numa, snapshot
from imagekit.selfcheck.verdicts import cpulist

FULL = (1 << 64) - 1


@pytest.mark.parametrize(
    ("masks", "cpus"),
    [
        ([], ""),
        ([0], ""),
        ([0, 0, 0], ""),
        ([1], "0"),
        ([1 << 5], "5"),
        ([1 << 63], "63"),
        ([0b1011], "0-1,3"),
        ([0xFF], "0-7"),
        ([FULL, (1 << 8) - 1], "0-71"),  # one Grace
        ([FULL, FULL, (1 << 16) - 1], "0-143"),  # both Graces of a GB200 tray
        ([0, FULL ^ ((1 << 8) - 1), (1 << 16) - 1], "72-143"),  # the second Grace
        ([(1 << 36) - 1, ((1 << 36) - 1) << 8], "0-35,72-107"),
        ([1 << 63, 1], "63-64"),  # a run across two words
        ([1, 0, 1 << 2], "0,130"),
    ],
)
def test_cpulist_of_nvml_masks(masks: list[int], cpus: str) -> None:
    assert cpulist.cpulist(masks, 64) == cpus


def test_cpulist_of_32_bit_words() -> None:
    assert cpulist.cpulist([0xFFFFFFFF, 0xFF], 32) == "0-39"


def test_nvml_words_are_c_unsigned_longs() -> None:
    assert cpulist.WORD_BITS == 64  # Linux on x86_64 and aarch64 (LP64)


# -- /sys/devices/system/node and /proc/sys/kernel/numa_balancing --------------------------

GIB_KB = 1 << 20


def node(root: Path, number: int, cpus: str, memory_kb: int) -> None:
    folder = root / f"node{number}"
    folder.mkdir(parents=True)
    (folder / "cpulist").write_text(f"{cpus}\n")
    (folder / "meminfo").write_text(
        f"Node {number} MemTotal:       {memory_kb} kB\n"
        f"Node {number} MemFree:        {memory_kb // 2} kB\n"
        f"Node {number} MemUsed:        {memory_kb - memory_kb // 2} kB\n"
    )


def sys_tree(tmp_path: Path, nodes: list[tuple[int, str, int]], balancing: str) -> Path:
    root = tmp_path / "sys/devices/system/node"
    root.mkdir(parents=True)
    for number, cpus, memory_kb in nodes:
        node(root, number, cpus, memory_kb)
    # what else the folder holds: files, and no node
    for name in ("possible", "online", "has_cpu", "has_memory", "power"):
        (root / name).write_text("0\n")
    (tmp_path / "numa_balancing").write_text(balancing)
    return root


def test_a_gh200_is_one_grace_and_its_gpu_memory(tmp_path: Path) -> None:
    """node0: the Grace's 72 CPUs and 480 GB of LPDDR5X; node1: the GPU's 95 GiB of HBM,
    no CPU; nodes 2-8: empty, kept for MIG (hwloc's GH200 topology)."""
    nodes = [(0, "0-71", 501219328), (1, "", 97280 * 1024)]
    nodes += [(n, "", 0) for n in range(2, 9)]
    root = sys_tree(tmp_path, nodes, "1\n")
    assert numa.read_numa(root, tmp_path / "numa_balancing") == {
        "nodes": [
            {"node": 0, "cpus": "0-71", "memory_mib": 489472},
            {"node": 1, "cpus": "", "memory_mib": 97280},
            *({"node": n, "cpus": "", "memory_mib": 0} for n in range(2, 9)),
        ],
        "balancing": 1,
    }


def test_a_gb200_tray_is_two_graces(tmp_path: Path) -> None:
    root = sys_tree(tmp_path, [(1, "72-143", 480 * GIB_KB), (0, "0-71", 480 * GIB_KB)], "0")
    found = numa.read_numa(root, tmp_path / "numa_balancing")
    assert found == {
        "nodes": [
            {"node": 0, "cpus": "0-71", "memory_mib": 480 * 1024},
            {"node": 1, "cpus": "72-143", "memory_mib": 480 * 1024},
        ],
        "balancing": 0,
    }


def test_nodes_sort_by_number_not_by_name(tmp_path: Path) -> None:
    root = sys_tree(tmp_path, [(n, "", 0) for n in (10, 2, 0, 1)], "0")
    found = numa.read_numa(root, tmp_path / "numa_balancing")
    assert [n["node"] for n in found["nodes"]] == [0, 1, 2, 10]


def test_a_kernel_without_numa_has_no_nodes(tmp_path: Path) -> None:
    (tmp_path / "numa_balancing").write_text("1\n")
    assert numa.read_numa(tmp_path / "none", tmp_path / "numa_balancing") == {
        "nodes": [],
        "balancing": None,
    }


@pytest.mark.parametrize(("text", "value"), [("0\n", 0), ("1\n", 1), ("2", 2), ("x\n", None)])
def test_numa_balancing(tmp_path: Path, text: str, value: int | None) -> None:
    (tmp_path / "numa_balancing").write_text(text)
    assert numa.read_balancing(tmp_path / "numa_balancing") == value
    assert numa.read_balancing(tmp_path / "absent") is None


def test_a_node_file_that_cannot_be_read_leaves_its_key_out(tmp_path: Path) -> None:
    root = sys_tree(tmp_path, [(0, "0-71", 480 * GIB_KB), (1, "72-143", 480 * GIB_KB)], "1")
    (root / "node0/meminfo").unlink()
    (root / "node1/cpulist").unlink()
    (root / "node1/meminfo").write_text("Node 1 MemFree: 5 kB\n")  # no MemTotal
    assert numa.read_numa(root, tmp_path / "numa_balancing")["nodes"] == [
        {"node": 0, "cpus": "0-71"},
        {"node": 1},
    ]


# -- /dev/nvidia-caps-imex-channels ------------------------------------------------------


def test_imex_channels(tmp_path: Path) -> None:
    folder = tmp_path / "nvidia-caps-imex-channels"
    assert container.read_imex_channels(folder) == ()  # absent: none passed in
    folder.mkdir()
    assert container.read_imex_channels(folder) == ()
    for name in ("channel1", "channel0"):
        (folder / name).touch()
    assert container.read_imex_channels(folder) == ("channel0", "channel1")
    assert container.read_imex_channels(folder / "channel0") == ()  # not a folder


def test_imex_channels_that_cannot_be_listed_are_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(path: object) -> list[str]:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(container.os, "listdir", refused)
    assert container.read_imex_channels(tmp_path) is None


def test_read_container_lists_the_containers_imex_channels(tmp_path: Path) -> None:
    (tmp_path / "nvidia0").touch()
    assert container.read_container({}, dev=str(tmp_path)).imex_channels == ()
    (tmp_path / "nvidia-caps-imex-channels").mkdir()
    (tmp_path / "nvidia-caps-imex-channels/channel0").touch()
    seen = container.read_container({}, dev=str(tmp_path))
    assert seen.imex_channels == ("channel0",)
    assert seen.device_nodes == (f"{tmp_path}/nvidia0",)


def test_the_snapshot_holds_the_numa_layout_and_imex_channels(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    layout = {"nodes": [{"node": 0, "cpus": "0-71", "memory_mib": 489472}], "balancing": 1}
    monkeypatch.setattr(numa, "read_numa", lambda: layout)
    monkeypatch.setattr(container, "read_imex_channels", lambda folder: ("channel0",))
    snap = snapshot.read_host(None)
    assert snap["numa"] == layout
    assert snap["container"]["imex_channels"] == ["channel0"]
    assert snap["format"] == 1
    monkeypatch.setattr(container, "read_imex_channels", lambda folder: None)
    assert snapshot.read_host(None)["container"]["imex_channels"] is None


def test_this_machines_readings_have_their_shape() -> None:
    found = numa.read_numa()
    assert isinstance(found["nodes"], list)
    assert found["balancing"] is None or isinstance(found["balancing"], int)
    for entry in found["nodes"]:
        assert isinstance(entry["node"], int) and isinstance(entry.get("cpus", ""), str)
