"""NCCL's transport read from its INFO log (selfcheck/nccl_log.py), over lines built from
NCCL's own format strings, release by release from 2.21 to 2.28, with and without the
`host:pid:tid [dev] NCCL INFO` prefix (and 2.26's optional timestamp before it); then real
lines from public reports. The format strings were copied from NVIDIA/nccl's source at the
tags v2.21.5-1, v2.22.3-1, v2.23.4-1, v2.24.3-1, v2.25.1-1, v2.26.2-1, v2.27.3-1 and
v2.28.9-1 (the file and line of each below)."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from imagekit.selfcheck.readers.nccl_log import transport_from_log, transports_from_log

# The format strings, as NCCL's source at each tag has them (github.com/NVIDIA/nccl); a
# name's suffix is the release that introduced that wording. PREFIX is debug.cc's INFO prefix
# (2.26 and later print it in two parts, "%s:%d:%d " then "[%d] NCCL INFO ": the same text).
PREFIX = "%s:%d:%d [%d] NCCL INFO "
P2P_DIRECT = "Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/direct pointer%s"
P2P_CUMEM = "Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/%s%s%s"
P2P_IPC = "Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/IPC%s%s"
P2P_INDIRECT = "Channel %02d/%01d : %d[%d] -> %d[%d] via P2P/indirect/%d[%d]%s"
SHM = "Channel %02d : %d[%d] -> %d[%d] via SHM/%s/%s"
NET_SEND = "Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s"
NET_SEND_PXN = "Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d(%d)%s%s"
NET_RECEIVE = "Channel %02d/%d : %d[%d] -> %d[%d] [receive] via NET/%s/%d%s%s"
COLLNET_SEND = "CollNet %02d/%1d : %d [send] via COLLNET/%s/%d%s"
COLLNET_RECEIVE = "CollNet %02d/%1d : %d [receive] via COLLNET/%s/%d%s"
CHANNELS = "%d coll channels, %d collnet channels, %d nvls channels, %d p2p channels, %d p2p channels per peer"
NVLS_MULTICAST = "NVLS multicast support is %savailable on dev %d"
NVLS_COMM = "NVLS comm %p headRank %d nHeads %d buffSize %zi memSize %zi nvlsPerRankSize %zi nvlsTotalSize %zi"
RINGS = "Connected all rings"
TREES = "Connected all trees"
NETWORK = "Using network %s"
NVLS_COMM_2_22 = (
    "NVLS comm %p headRank %d nHeads %d buffSize %zu nvlsPerRankSize %zu nvlsTotalSize %zu"
)
RINGS_2_24 = "Connected all rings, use ring PXN %d GDR %d"
NET_SEND_2_26 = "Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s%s"
NET_SEND_PXN_2_26 = "Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d(%d)%s%s%s"
NET_RECEIVE_2_26 = "Channel %02d/%d : %d[%d] -> %d[%d] [receive] via NET/%s/%d%s%s%s"
COLLNET_SEND_2_26 = "CollNet %02d/%1d : %d [send] via COLLNET/%s/%d%s%s"
COLLNET_RECEIVE_2_26 = "CollNet %02d/%1d : %d [receive] via COLLNET/%s/%d%s%s"
NVLS_MULTICAST_2_27 = "NVLS multicast support is %savailable on dev %d (NVLS_NCHANNELS %d)"
NVLS_COMM_2_27 = "NVLS comm %p headRank %d nHeads %d nvlsRanks %d buffSize %zu nvlsPerRankSize %zu nvlsTotalSize %zu"

# release -> message kind -> (the file and line at tag v<release>-1, the format string).
NCCL_FORMATS: dict[str, dict[str, tuple[str, str]]] = {
    "2.21.5": {
        "prefix": ("src/debug.cc:183", PREFIX),
        "p2p_direct": ("src/transport/p2p.cc:364", P2P_DIRECT),
        "p2p_cumem": ("src/transport/p2p.cc:371", P2P_CUMEM),
        "p2p_ipc": ("src/transport/p2p.cc:376", P2P_IPC),
        "p2p_indirect": ("src/transport/p2p.cc:384", P2P_INDIRECT),
        "shm": ("src/transport/shm.cc:95", SHM),
        "net_send": ("src/transport/net.cc:195", NET_SEND),
        "net_send_pxn": ("src/transport/net.cc:198", NET_SEND_PXN),
        "net_receive": ("src/transport/net.cc:235", NET_RECEIVE),
        "collnet_send": ("src/transport/coll_net.cc:167", COLLNET_SEND),
        "collnet_receive": ("src/transport/coll_net.cc:191", COLLNET_RECEIVE),
        "channels": ("src/init.cc:1297", CHANNELS),
        "nvls_multicast": ("src/transport/nvls.cc:258", NVLS_MULTICAST),
        "nvls_comm": ("src/transport/nvls.cc:316", NVLS_COMM),
        "rings": ("src/init.cc:1264", RINGS),
        "trees": ("src/init.cc:1274", TREES),
        "network": ("src/init.cc:322", NETWORK),
    },
    "2.22.3": {
        "prefix": ("src/debug.cc:196", PREFIX),
        "p2p_direct": ("src/transport/p2p.cc:365", P2P_DIRECT),
        "p2p_cumem": ("src/transport/p2p.cc:372", P2P_CUMEM),
        "p2p_ipc": ("src/transport/p2p.cc:377", P2P_IPC),
        "p2p_indirect": ("src/transport/p2p.cc:385", P2P_INDIRECT),
        "shm": ("src/transport/shm.cc:96", SHM),
        "net_send": ("src/transport/net.cc:196", NET_SEND),
        "net_send_pxn": ("src/transport/net.cc:199", NET_SEND_PXN),
        "net_receive": ("src/transport/net.cc:236", NET_RECEIVE),
        "collnet_send": ("src/transport/coll_net.cc:170", COLLNET_SEND),
        "collnet_receive": ("src/transport/coll_net.cc:194", COLLNET_RECEIVE),
        "channels": ("src/init.cc:1234", CHANNELS),
        "nvls_multicast": ("src/transport/nvls.cc:164", NVLS_MULTICAST),
        "nvls_comm": ("src/transport/nvls.cc:267", NVLS_COMM_2_22),
        "rings": ("src/transport/generic.cc:12", RINGS),
        "trees": ("src/transport/generic.cc:30", TREES),
        "network": ("src/init.cc:331", NETWORK),
    },
    "2.23.4": {
        "prefix": ("src/debug.cc:204", PREFIX),
        "p2p_direct": ("src/transport/p2p.cc:390", P2P_DIRECT),
        "p2p_cumem": ("src/transport/p2p.cc:397", P2P_CUMEM),
        "p2p_ipc": ("src/transport/p2p.cc:402", P2P_IPC),
        "p2p_indirect": ("src/transport/p2p.cc:410", P2P_INDIRECT),
        "shm": ("src/transport/shm.cc:126", SHM),
        "net_send": ("src/transport/net.cc:194", NET_SEND),
        "net_send_pxn": ("src/transport/net.cc:197", NET_SEND_PXN),
        "net_receive": ("src/transport/net.cc:233", NET_RECEIVE),
        "collnet_send": ("src/transport/coll_net.cc:169", COLLNET_SEND),
        "collnet_receive": ("src/transport/coll_net.cc:193", COLLNET_RECEIVE),
        "channels": ("src/init.cc:1274", CHANNELS),
        "nvls_multicast": ("src/transport/nvls.cc:171", NVLS_MULTICAST),
        "nvls_comm": ("src/transport/nvls.cc:281", NVLS_COMM_2_22),
        "rings": ("src/transport/generic.cc:12", RINGS),
        "trees": ("src/transport/generic.cc:30", TREES),
        "network": ("src/init.cc:342", NETWORK),
    },
    "2.24.3": {
        "prefix": ("src/debug.cc:207", PREFIX),
        "p2p_direct": ("src/transport/p2p.cc:385", P2P_DIRECT),
        "p2p_cumem": ("src/transport/p2p.cc:392", P2P_CUMEM),
        "p2p_ipc": ("src/transport/p2p.cc:397", P2P_IPC),
        "p2p_indirect": ("src/transport/p2p.cc:405", P2P_INDIRECT),
        "shm": ("src/transport/shm.cc:126", SHM),
        "net_send": ("src/transport/net.cc:207", NET_SEND),
        "net_send_pxn": ("src/transport/net.cc:210", NET_SEND_PXN),
        "net_receive": ("src/transport/net.cc:250", NET_RECEIVE),
        "collnet_send": ("src/transport/coll_net.cc:171", COLLNET_SEND),
        "collnet_receive": ("src/transport/coll_net.cc:195", COLLNET_RECEIVE),
        "channels": ("src/init.cc:1276", CHANNELS),
        "nvls_multicast": ("src/transport/nvls.cc:172", NVLS_MULTICAST),
        "nvls_comm": ("src/transport/nvls.cc:282", NVLS_COMM_2_22),
        "rings": ("src/transport/generic.cc:31", RINGS_2_24),
        "trees": ("src/transport/generic.cc:50", TREES),
        "network": ("src/init.cc:345", NETWORK),
    },
    "2.25.1": {
        "prefix": ("src/debug.cc:207", PREFIX),
        "p2p_direct": ("src/transport/p2p.cc:385", P2P_DIRECT),
        "p2p_cumem": ("src/transport/p2p.cc:392", P2P_CUMEM),
        "p2p_ipc": ("src/transport/p2p.cc:397", P2P_IPC),
        "p2p_indirect": ("src/transport/p2p.cc:405", P2P_INDIRECT),
        "shm": ("src/transport/shm.cc:126", SHM),
        "net_send": ("src/transport/net.cc:207", NET_SEND),
        "net_send_pxn": ("src/transport/net.cc:210", NET_SEND_PXN),
        "net_receive": ("src/transport/net.cc:250", NET_RECEIVE),
        "collnet_send": ("src/transport/coll_net.cc:171", COLLNET_SEND),
        "collnet_receive": ("src/transport/coll_net.cc:195", COLLNET_RECEIVE),
        "channels": ("src/init.cc:1216", CHANNELS),
        "nvls_multicast": ("src/transport/nvls.cc:174", NVLS_MULTICAST),
        "nvls_comm": ("src/transport/nvls.cc:288", NVLS_COMM_2_22),
        "rings": ("src/transport/generic.cc:31", RINGS_2_24),
        "trees": ("src/transport/generic.cc:50", TREES),
        "network": ("src/init.cc:348", NETWORK),
    },
    "2.26.2": {
        "prefix": ("src/debug.cc:322,336", PREFIX),
        "p2p_direct": ("src/transport/p2p.cc:385", P2P_DIRECT),
        "p2p_cumem": ("src/transport/p2p.cc:392", P2P_CUMEM),
        "p2p_ipc": ("src/transport/p2p.cc:397", P2P_IPC),
        "p2p_indirect": ("src/transport/p2p.cc:405", P2P_INDIRECT),
        "shm": ("src/transport/shm.cc:128", SHM),
        "net_send": ("src/transport/net.cc:217", NET_SEND_2_26),
        "net_send_pxn": ("src/transport/net.cc:221", NET_SEND_PXN_2_26),
        "net_receive": ("src/transport/net.cc:263", NET_RECEIVE_2_26),
        "collnet_send": ("src/transport/coll_net.cc:181", COLLNET_SEND_2_26),
        "collnet_receive": ("src/transport/coll_net.cc:205", COLLNET_RECEIVE_2_26),
        "channels": ("src/init.cc:1219", CHANNELS),
        "nvls_multicast": ("src/transport/nvls.cc:174", NVLS_MULTICAST),
        "nvls_comm": ("src/transport/nvls.cc:294", NVLS_COMM_2_22),
        "rings": ("src/transport/generic.cc:31", RINGS_2_24),
        "trees": ("src/transport/generic.cc:50", TREES),
        "network": ("src/init.cc:337", NETWORK),
    },
    "2.27.3": {
        "prefix": ("src/debug.cc:352,366", PREFIX),
        "p2p_direct": ("src/transport/p2p.cc:386", P2P_DIRECT),
        "p2p_cumem": ("src/transport/p2p.cc:393", P2P_CUMEM),
        "p2p_ipc": ("src/transport/p2p.cc:398", P2P_IPC),
        "p2p_indirect": ("src/transport/p2p.cc:406", P2P_INDIRECT),
        "shm": ("src/transport/shm.cc:128", SHM),
        "net_send": ("src/transport/net.cc:218", NET_SEND_2_26),
        "net_send_pxn": ("src/transport/net.cc:222", NET_SEND_PXN_2_26),
        "net_receive": ("src/transport/net.cc:264", NET_RECEIVE_2_26),
        "collnet_send": ("src/transport/coll_net.cc:182", COLLNET_SEND_2_26),
        "collnet_receive": ("src/transport/coll_net.cc:206", COLLNET_RECEIVE_2_26),
        "channels": ("src/init.cc:1232", CHANNELS),
        "nvls_multicast": ("src/transport/nvls.cc:200", NVLS_MULTICAST_2_27),
        "nvls_comm": ("src/transport/nvls.cc:339", NVLS_COMM_2_27),
        "rings": ("src/transport/generic.cc:31", RINGS_2_24),
        "trees": ("src/transport/generic.cc:50", TREES),
        "network": ("src/init.cc:346", NETWORK),
    },
    "2.28.9": {
        "prefix": ("src/debug.cc:349,363", PREFIX),
        "p2p_direct": ("src/transport/p2p.cc:386", P2P_DIRECT),
        "p2p_cumem": ("src/transport/p2p.cc:393", P2P_CUMEM),
        "p2p_ipc": ("src/transport/p2p.cc:398", P2P_IPC),
        "p2p_indirect": ("src/transport/p2p.cc:406", P2P_INDIRECT),
        "shm": ("src/transport/shm.cc:128", SHM),
        "net_send": ("src/transport/net.cc:313", NET_SEND_2_26),
        "net_send_pxn": ("src/transport/net.cc:317", NET_SEND_PXN_2_26),
        "net_receive": ("src/transport/net.cc:359", NET_RECEIVE_2_26),
        "collnet_send": ("src/transport/coll_net.cc:182", COLLNET_SEND_2_26),
        "collnet_receive": ("src/transport/coll_net.cc:206", COLLNET_RECEIVE_2_26),
        "channels": ("src/init.cc:1358", CHANNELS),
        "nvls_multicast": ("src/transport/nvls.cc:201", NVLS_MULTICAST_2_27),
        "nvls_comm": ("src/transport/nvls.cc:340", NVLS_COMM_2_27),
        "rings": ("src/transport/generic.cc:37", RINGS_2_24),
        "trees": ("src/transport/generic.cc:56", TREES),
        "network": ("src/init.cc:428", NETWORK),
    },
}


# -- rendering the format strings -------------------------------------------------------------

_CONVERSION = re.compile(r"%(0?\d)?(zu|zi|d|s|p)")
# Python's % has no %p or %zu: a pointer prints as the hex text passed for it, size_t as %d.
_PYTHON = {"zu": "d", "zi": "d", "d": "d", "s": "s", "p": "s"}


def printf(fmt: str, *values: object) -> str:
    """C's printf for the conversions NCCL's messages use (%d, %02d, %s, %p, %zu, %zi)."""
    assert len(_CONVERSION.findall(fmt)) == len(values), (fmt, values)
    python = _CONVERSION.sub(lambda m: f"%{m[1] or ''}{_PYTHON[m[2]]}", fmt)
    return python % values


class Release:
    """One release's messages, each built from its own format string."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.formats = NCCL_FORMATS[name]

    def fmt(self, kind: str) -> str:
        return self.formats[kind][1]

    def p2p(self, how: str = "CUMEM", read: bool = True, ce: bool = False) -> str:
        head = (3, 0, 3, 3, 4, 4)  # channel 03/0 : rank 3 (GPU 3) -> rank 4 (GPU 4)
        use_read, memcpy = "/read" if read else "", "/CE" if ce else ""
        if how == "direct":
            return printf(self.fmt("p2p_direct"), *head, use_read)
        if how == "IPC":
            return printf(self.fmt("p2p_ipc"), *head, use_read, memcpy)
        if how == "indirect":
            return printf(self.fmt("p2p_indirect"), *head, 2, 2, use_read)
        return printf(self.fmt("p2p_cumem"), *head, how, use_read, memcpy)  # CUMEM or MNNVL

    def shm(self, send: str = "direct", receive: str = "direct") -> str:
        return printf(self.fmt("shm"), 9, 6, 6, 7, 7, send, receive)

    def net(self, name: str, kind: str = "net_send", gdr: bool = True, shared: bool = False) -> str:
        fmt = self.fmt(kind)
        head: tuple[object, ...] = (
            (7, 0, 0, 0, 8, 0) if kind != "net_receive" else (7, 0, 8, 0, 0, 0)
        )
        head += (name, 3) + ((1,) if "(%d)" in fmt else ())  # the NIC; the proxy rank (PXN)
        gdr_pci = ("/GDRDMA" if gdr else "",) + (("",) if fmt.endswith("%s%s%s") else ())
        return printf(fmt, *head, *gdr_pci, "/Shared" if shared else "")

    def collnet(self, kind: str = "collnet_send") -> str:
        fmt = self.fmt(kind)
        tail = ("/GDRDMA",) + (("",) if fmt.endswith("%s%s") else ())
        return printf(fmt, 0, 0, 0, "SHARP", 0, *tail)

    def channels(self, nvls: int) -> str:
        return printf(self.fmt("channels"), 24, 24, nvls, 32, 4)

    def multicast(self, available: bool, channels: int) -> str:
        fmt = self.fmt("nvls_multicast")
        extra = (channels,) if "NVLS_NCHANNELS" in fmt else ()
        return printf(fmt, "" if available else "not ", 0, *extra)

    def nvls_comm(self) -> str:
        fmt = self.fmt("nvls_comm")
        sizes = [8] * (len(_CONVERSION.findall(fmt)) - 1)  # headRank, nHeads, sizes...
        return printf(fmt, "0x55d0c8a3e000", *sizes)

    def rings(self) -> str:
        fmt = self.fmt("rings")
        return printf(fmt, *((0, 1) if "%d" in fmt else ()))

    def trees(self) -> str:
        return printf(self.fmt("trees"))

    def network(self, name: str) -> str:
        return printf(self.fmt("network"), name)


# What a run logs (one rank's NCCL_DEBUG=INFO lines of INIT and NET), and what it used.
SCENARIOS: dict[str, tuple[Callable[[Release], list[str]], tuple[str, ...]]] = {
    "one node with NVLS": (
        lambda r: [
            r.network("IB"),
            r.multicast(True, 16),
            r.p2p("CUMEM"),
            r.nvls_comm(),
            r.channels(16),
            r.rings(),
            r.trees(),
        ],
        ("P2P", "NVLS"),
    ),
    "one node, no multicast": (
        lambda r: [
            r.multicast(False, 0),
            r.p2p("direct"),
            r.p2p("IPC", ce=True),
            r.channels(0),
            r.rings(),
            r.trees(),
        ],
        ("P2P",),
    ),
    "a PCIe ring with P2P and SHM hops": (
        lambda r: [
            r.p2p("IPC", read=False),
            r.shm(),
            r.shm("CE", "direct"),
            r.p2p("indirect"),
            r.channels(0),
        ],
        ("SHM", "P2P"),
    ),
    "two nodes over IB": (
        lambda r: [
            r.network("IB"),
            r.net("IB"),
            r.net("IB", "net_receive"),
            r.net("IB", "net_send_pxn"),
            r.p2p("CUMEM"),
            r.rings(),
            r.trees(),
        ],
        ("IB", "P2P"),
    ),
    "HPC-X's IB plugin": (
        lambda r: [
            r.network("IBext_v8"),
            r.net("IBext_v8", shared=True),
            r.net("IBext_v8", "net_receive", shared=True),
        ],
        ("IB",),
    ),
    "two nodes over TCP": (
        lambda r: [
            r.network("Socket"),
            r.net("Socket", gdr=False),
            r.net("Socket", "net_receive", gdr=False),
            r.shm(),
        ],
        ("Socket", "SHM"),
    ),
    "IB with one channel on sockets": (
        lambda r: [r.net("IB"), r.net("Socket", "net_receive", gdr=False)],
        ("Socket", "IB"),
    ),
    "SHARP (CollNet)": (
        lambda r: [r.net("IB"), r.collnet(), r.collnet("collnet_receive")],
        ("IB", "CollNet"),
    ),
    "another network plugin": (lambda r: [r.net("AWS Libfabric", gdr=False)], ("AWS Libfabric",)),
    "a multi-node NVLink domain": (
        lambda r: [r.p2p("MNNVL"), r.multicast(True, 24), r.channels(24)],
        ("MNNVL", "NVLS"),
    ),
    "no connection line": (
        lambda r: [r.network("IB"), r.multicast(True, 16), r.channels(0), r.rings(), r.trees()],
        (),
    ),
}


def prefixed(release: Release, style: str, message: str) -> str:
    if style == "bare":
        return message
    prefix = printf(release.fmt("prefix"), "dgx-a07", 41215, 41377, 3)
    stamp = "[2025-06-02 14:03:11] " if style == "timestamped" else ""
    return stamp + prefix + message


STYLES = [
    (release, style)
    for release in NCCL_FORMATS
    for style in ("bare", "prefixed", "timestamped")
    if style != "timestamped" or release >= "2.26"  # NCCL_DEBUG_TIMESTAMP_LEVELS: 2.26
]


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
@pytest.mark.parametrize(("release", "style"), STYLES)
def test_transports_from_nccls_own_format_strings(release: str, style: str, scenario: str) -> None:
    build, expected = SCENARIOS[scenario]
    r = Release(release)
    log = "\n".join(prefixed(r, style, message) for message in build(r)) + "\n"
    assert transports_from_log(log) == expected, log
    assert transport_from_log(log) == ("+".join(expected) or None)


def test_every_release_has_every_message_kind_with_its_source() -> None:
    kinds = set(NCCL_FORMATS["2.21.5"])
    for release, formats in NCCL_FORMATS.items():
        assert set(formats) == kinds, release
        for where, _ in formats.values():
            assert re.fullmatch(r"src/[\w/]+\.cc:\d+(,\d+)?", where), (release, where)


def test_a_rendered_line_reads_as_nccl_writes_it() -> None:
    r = Release("2.28.9")
    assert prefixed(r, "prefixed", r.net("IB", gdr=True)) == (
        "dgx-a07:41215:41377 [3] NCCL INFO Channel 07/0 : 0[0] -> 8[0] [send] via NET/IB/3/GDRDMA"
    )
    assert r.p2p("CUMEM") == "Channel 03/0 : 3[3] -> 4[4] via P2P/CUMEM/read"
    assert r.shm() == "Channel 09 : 6[6] -> 7[7] via SHM/direct/direct"
    assert (
        r.multicast(False, 0)
        == "NVLS multicast support is not available on dev 0 (NVLS_NCHANNELS 0)"
    )
    assert Release("2.21.5").net("IB", "net_send_pxn") == (
        "Channel 07/0 : 0[0] -> 8[0] [send] via NET/IB/3(1)/GDRDMA"
    )


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        # The count NCCL settled on wins over multicast being available.
        (
            "NVLS multicast support is available on dev 0\n0 coll channels, 0 collnet channels, "
            "0 nvls channels, 0 p2p channels, 0 p2p channels per peer",
            (),
        ),
        ("NVLS multicast support is available on dev 0 (NVLS_NCHANNELS 0)", ()),
        ("NVLS multicast support is available on dev 0 (NVLS_NCHANNELS 16)", ("NVLS",)),
        ("NVLS multicast support is not available on dev 0", ()),
        ("Using network IB", ()),
        ("", ()),
    ],
)
def test_nvls_and_the_lines_that_prove_nothing(line: str, expected: tuple[str, ...]) -> None:
    assert transports_from_log(line) == expected


# -- real lines from public reports (hosts shortened where long) ----------------------------------

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
# One rank on one H200 (torch 2.11.0+cu130, NCCL 2.28.9; this project's device check): the
# ring's own "Channel 00/64 : 0" lines name no peer and no transport.
ONE_RANK = """\
vm:465:465 [0] NCCL INFO NCCL version 2.28.9+cuda13.0
vm:465:465 [0] NCCL INFO Using network Socket
vm:465:465 [0] NCCL INFO comm 0x137fc6e0 rank 0 nRanks 1 nNodes 1 localRanks 1 localRank 0 MNNVL 0
vm:465:465 [0] NCCL INFO Channel 00/64 : 0
vm:465:465 [0] NCCL INFO Channel 63/64 : 0
vm:465:465 [0] NCCL INFO 64 coll channels, 64 collnet channels, 0 nvls channels, 64 p2p channels, 64 p2p channels per peer
"""


@pytest.mark.parametrize(
    ("log", "transport"),
    [
        (SINGLE_NODE_NVLS, "P2P+NVLS"),
        (H800_NO_NVLS, "P2P"),  # multicast not available: 0 nvls channels
        (IB_GDR, "IB+P2P"),
        (IBEXT, "IB"),  # HPC-X's IB plugin, on RoCE
        (SOCKET, "Socket+SHM"),
        (SHM, "SHM"),
        (NVLS_COMM, "P2P+NVLS"),
        (IPC, "P2P"),
        (NO_CHANNELS, None),  # "Using network" alone: no connection was made
        (ONE_RANK, None),
        ("", None),
    ],
)
def test_transport_from_real_logs(log: str, transport: str | None) -> None:
    assert transport_from_log(log) == transport
