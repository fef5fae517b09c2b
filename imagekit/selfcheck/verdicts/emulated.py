"""Whether the self-check runs under QEMU user emulation (an arm64 image on an x86-64 host):
then every check takes many times longer, so its time limit is raised and no timing is a
verdict on the hardware. Standard library only; a pure function over what the container
reads, table-tested for each kind of host (and the check record of imagekit.contract)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from imagekit.contract.checks import ENV_EMULATED, CheckResult, Status

# The MIDR implementer code Arm reserves for software use: no silicon has it, and QEMU's
# emulated Arm CPU shows it in the /proc/cpuinfo it makes up (seen with QEMU 11.1).
SOFTWARE_IMPLEMENTER = "0x00"


def emulation(
    machine: str, flags: Iterable[str], env: Mapping[str, str], implementer: str = ""
) -> str:
    """ "" where the checks run natively; else how emulation is known: the host said so, or
    the CPU in /proc/cpuinfo is not the machine the process runs as (QEMU before 8.1 passes
    the host's /proc/cpuinfo through), or it is an Arm CPU no vendor made (QEMU 8.1 and
    later make one up). `implementer`: /proc/cpuinfo's `CPU implementer`, where read."""
    if said := env.get(ENV_EMULATED, ""):
        return f"the host said so ({ENV_EMULATED}={said})"
    have = set(flags)
    arm_cpu = "asimd" in have  # aarch64's Features line; x86 flags never list it
    if machine == "aarch64" and have and not arm_cpu:
        return "an aarch64 process on a CPU whose /proc/cpuinfo is x86-64's (QEMU)"
    if machine == "aarch64" and implementer == SOFTWARE_IMPLEMENTER:
        return (
            f"an Arm CPU whose implementer is {SOFTWARE_IMPLEMENTER}, which Arm reserves for "
            "software: QEMU's own (QEMU 8.1 and later)"
        )
    if machine == "x86_64" and arm_cpu:
        return "an x86_64 process on a CPU whose /proc/cpuinfo is Arm's (QEMU)"
    return ""


def unjudged_crash(result: CheckResult, emulated: str) -> CheckResult:
    """A probe killed by a signal under emulation is not judged: QEMU user mode cannot run
    every native library (onnxruntime's aarch64 build dies with SIGSEGV on import under
    Debian 12's QEMU 7.2, docs/benchmarks.md), and the same image may run on an arm64 host.
    Skipped, never passed, with the crash kept (`--require` still turns it into a failure)."""
    crashed = "signal" in result.measurements and result.reason.startswith("crashed")
    if not emulated or result.status is not Status.FAILED or not crashed:
        return result
    reason = (
        f"{result.reason} under emulation ({emulated}): a native library QEMU user mode "
        "cannot run, not judged here; run the check on a host of the image's platform"
    )
    measurements = {**result.measurements, "emulated_crash": True}
    return dataclasses.replace(
        result, status=Status.SKIPPED, reason=reason, measurements=measurements
    )
