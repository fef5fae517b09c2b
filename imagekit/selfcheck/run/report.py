"""Self-check output: a readable table, JSON and JUnit XML."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import Any

from imagekit.contract.checks import RESULT_STATUSES, CheckResult, Status
from imagekit.contract.text import shown

KEYS = (
    "torch",
    "gpu",
    "arch",
    "arch_served_by",
    "driver",
    "cudnn",
    "nccl",
    "device",
    "note",
    "final_loss_fp32",
    "final_loss_bf16",
    "final_loss_fp16",
    "speedup_bf16_vs_fp32",
    "backend",
    "world_size",
    "max_grad_difference",
    "allreduce_busbw_GBps",
    "nccl_transport",
    "dtype",
    "max_error_vs_fp64",
    "math_kernel_error_vs_fp64",
    "speedup_vs_math",
    "flash_attn_package",
    "exporter",
    "provider_ran",
    "tensorrt",
    "max_error_vs_torch",
    "gemm_dtype",
    "gemm_tflops",
    "gemm_vs_peak",
    "copy_tbps",
    "bandwidth_vs_peak",
    "relative_error",
    "size_ratio_fp32_vs_int8",
    "speedup_int8_vs_fp32",
    "peak_mib_plain",
    "peak_mib_checkpointed",
    "loss_difference",
    "figures",
    "warning",
)


def _short(value: object) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _details(result: CheckResult) -> str:
    m = result.measurements
    shown = [f"{k}={_short(m[k])}" for k in KEYS if m.get(k) not in (None, "", {})]
    return "; ".join(filter(None, [result.reason, ", ".join(shown)]))


def _count(results: dict[str, CheckResult], status: Status) -> int:
    return sum(r.status is status for r in results.values())


def checks_table(results: dict[str, CheckResult]) -> str:
    lines = [f"{'CHECK':<15}{'STATUS':<9}{'TIME':>7}  DETAILS"]
    for name, r in results.items():
        status = "TIMEOUT" if r.timed_out else r.status.value.upper()
        lines.append(f"{name:<15}{status:<9}{r.seconds:>6.1f}s  {_details(r)}")
    lines.append(", ".join(f"{_count(results, s)} {s.value}" for s in RESULT_STATUSES))
    # a row's details hold what drivers and libraries said (a GPU's name, an exception's
    # text): escaped, so none of it starts a line or moves the cursor
    return "\n".join(shown(line) for line in lines)


def to_json(results: dict[str, CheckResult], context: dict[str, Any]) -> str:
    checks = [r.to_json() for r in results.values()]
    return json.dumps({"context": context, "checks": checks}, indent=2, default=str)


def to_junit(results: dict[str, CheckResult]) -> str:
    suite = ET.Element(
        "testsuite",
        name="imagekit.selfcheck",
        tests=str(len(results)),
        failures=str(_count(results, Status.FAILED)),
        skipped=str(_count(results, Status.SKIPPED)),
        time=f"{sum(r.seconds for r in results.values()):.2f}",
    )
    for name, r in results.items():
        case = ET.SubElement(
            suite, "testcase", classname="selfcheck", name=name, time=f"{r.seconds:.2f}"
        )
        if r.failed:
            ET.SubElement(case, "failure", message=r.reason).text = r.log_tail
        elif r.skipped:
            ET.SubElement(case, "skipped", message=r.reason)
        ET.SubElement(case, "system-out").text = json.dumps(r.measurements, default=str)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True)
