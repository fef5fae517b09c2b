"""The verdicts over the fleet tools' counters (counter_rules.py), table-tested per reading:
Xid events during the run, SRAM and lifetime ECC counts, the PCIe replay rate."""

from __future__ import annotations

import re
from typing import Any

import pytest

from imagekit.contract.checks import RecordError, Status
from imagekit.contract.host_snapshot import Gpu
from imagekit.selfcheck.verdicts import counter_rules

from .conftest import typed

HEALTHY = {
    "index": 3,
    "xid_events": [],
    "ecc_sram_uncorrected": 0,
    "ecc_sram_corrected": 0,
    "ecc_aggregate_uncorrected": 0,
    "pcie_replays_during_run": 0,
    "pcie_gen_under_load": 5,
    "pcie_width_under_load": 16,
    "power_limit_w": 700,
    "power_default_limit_w": 700,
    "temperature_max_c": 70,
    "temperature_slowdown_c": 87,
}


def levels(readings: dict[str, Any], run_seconds: Any = 60) -> set[tuple[str, str]]:
    gpu = {**HEALTHY, **readings}
    for key in [k for k, v in readings.items() if v is None]:
        gpu.pop(key)
    found, _ = counter_rules.counter_findings(typed(gpu, Gpu), run_seconds)
    return {(f.level, f.rule) for f in found}


@pytest.mark.parametrize(
    ("readings", "want"),
    [
        ({}, set()),
        # Xids: Azure's list fails, an application's own (13, 31, 43) warns
        ({"xid_events": [79]}, {(Status.FAILED, "xid")}),
        ({"xid_events": [48, 48]}, {(Status.FAILED, "xid")}),
        ({"xid_events": [13]}, {(Status.WARNED, "xid")}),
        ({"xid_events": [13, 94]}, {(Status.FAILED, "xid"), (Status.WARNED, "xid")}),
        ({"xid_events": None}, {(Status.SKIPPED, "xid")}),
        # SRAM: any uncorrectable, or more than 10000 correctable
        ({"ecc_sram_uncorrected": 1}, {(Status.FAILED, "ecc-sram")}),
        ({"ecc_sram_corrected": 10_000}, set()),
        ({"ecc_sram_corrected": 10_001}, {(Status.FAILED, "ecc-sram")}),
        ({"ecc_sram_corrected": None}, {(Status.SKIPPED, "ecc-sram")}),
        # lifetime: repaired where no remap is pending, so a warning
        ({"ecc_aggregate_uncorrected": 4}, {(Status.WARNED, "ecc-aggregate")}),
        ({"ecc_aggregate_uncorrected": None}, {(Status.SKIPPED, "ecc-aggregate")}),
        # PCIe replays: DCGM's 1.92 a lane a minute on Gen5 (31 on x16), 0.96 on Gen4 (16)
        ({"pcie_replays_during_run": 31}, set()),
        ({"pcie_replays_during_run": 32}, {(Status.WARNED, "pcie-replays")}),
        (
            {"pcie_replays_during_run": 17, "pcie_gen_under_load": 4},
            {(Status.WARNED, "pcie-replays")},
        ),
        ({"pcie_replays_during_run": 16, "pcie_gen_under_load": 4}, set()),
        ({"pcie_replays_during_run": None}, {(Status.SKIPPED, "pcie-replays")}),
        # the counter went back (the driver reloaded), or a link read as x0: not judged
        ({"pcie_replays_during_run": -5}, {(Status.SKIPPED, "pcie-replays")}),
        (
            {"pcie_replays_during_run": 40, "pcie_width_under_load": 0},
            {(Status.SKIPPED, "pcie-replays")},
        ),
        # a power limit NVML gave as a fraction of a watt is no count: not judged
        ({"power_limit_w": 699.5}, {(Status.SKIPPED, "power-limit")}),
        # a Grace superchip's GPU reaches its CPU over NVLink-C2C: no PCIe link to count
        (
            {"pcie_replays_during_run": None, "host_link": "c2c", "pcie_gen_under_load": None},
            set(),
        ),
        # a power limit below the default holds the GPU under what its floor assumes
        ({"power_limit_w": 500}, {(Status.WARNED, "power-limit")}),
        ({"power_limit_w": 750}, set()),
        ({"power_default_limit_w": None}, {(Status.SKIPPED, "power-limit")}),
        # within 5 C of the slowdown temperature under load
        ({"temperature_max_c": 81}, set()),
        ({"temperature_max_c": 82}, {(Status.WARNED, "temperature")}),
        ({"temperature_slowdown_c": None}, {(Status.SKIPPED, "temperature")}),
        # the whole GPU's counters on a MIG slice: not the slice's
        (
            {"mig_mode": True, "ecc_sram_uncorrected": 5},
            {
                (Status.SKIPPED, "ecc-sram"),
                (Status.SKIPPED, "ecc-aggregate"),
                (Status.SKIPPED, "pcie-replays"),
                (Status.SKIPPED, "power-limit"),
                (Status.SKIPPED, "temperature"),
            },
        ),
    ],
)
def test_counter_rules(readings: dict[str, Any], want: set[tuple[str, str]]) -> None:
    assert levels(readings) == want


@pytest.mark.parametrize(
    ("readings", "key"),
    [
        ({"xid_events": "79"}, "xid_events"),
        ({"xid_events": [79, None]}, "xid_events[1]"),
        ({"ecc_sram_uncorrected": "1"}, "ecc_sram_uncorrected"),
        ({"ecc_aggregate_uncorrected": True}, "ecc_aggregate_uncorrected"),
        ({"pcie_replays_during_run": 3.5}, "pcie_replays_during_run"),
        ({"power_limit_w": "700"}, "power_limit_w"),
        ({"temperature_max_c": [90]}, "temperature_max_c"),
    ],
)
def test_a_hand_edited_counter_is_refused_at_load_naming_the_key(
    readings: dict[str, Any], key: str
) -> None:
    """What is not a count never reaches a rule: reading the snapshot refuses it."""
    with pytest.raises(RecordError, match=rf"^gpus\[0\]\.{re.escape(key)}: "):
        typed({"gpus": [{**HEALTHY, **readings}]})


@pytest.mark.parametrize(
    ("gen", "width", "seconds", "limit"),
    [(5, 16, 60, 31), (4, 16, 60, 16), (5, 8, 60, 16), (5, 16, 30, 31), (5, 16, 300, 155)],
)
def test_the_replay_limit_is_dcgms_rate_over_the_run(
    gen: int, width: int, seconds: float, limit: int
) -> None:
    """At least a minute's worth; a five-minute soak five minutes' worth."""
    assert counter_rules.replay_limit(gen, width, seconds) == limit


def test_a_replay_warning_names_the_count_the_time_and_the_link() -> None:
    gpu = {**HEALTHY, "pcie_replays_during_run": 400}
    (finding,) = counter_rules.pcie_replays(typed(gpu, Gpu), 120)[0]
    assert finding.text() == (
        "GPU 3: 400 PCIe replays in 120 s, above the 62 DCGM's health watch allows on Gen5 x16 "
        "(a bit error rate over 1e-12): a marginal link, riser or slot"
    )


def test_an_xid_failure_names_the_xids() -> None:
    (finding,) = counter_rules.xids(typed({**HEALTHY, "xid_events": [79, 79]}, Gpu))[0]
    assert finding.text().startswith("GPU 3: Xid 79 during the run: the driver reported")


def test_an_unread_counter_says_what_nvml_said() -> None:
    gpu = {k: v for k, v in HEALTHY.items() if k != "xid_events"}
    gpu["unread"] = {"xid_events": "Not Supported"}
    (finding,) = counter_rules.xids(typed(gpu, Gpu))[0]
    assert finding.text() == "GPU 3: Xid events during the run (NVML said: Not Supported)"
