"""Which INT8 scheme the int8 check quantizes with on this CPU, how close to fp32 it must
come, and the /proc/cpuinfo reader that tells. Pure functions and a thin reader; standard
library only.

onnxruntime's x86-64 U8S8 kernels (uint8 activations x int8 weights) use VPMADDUBSW on AVX2
and AVX-512 without VNNI, which adds pairs of products into a saturating 16-bit integer:
"if you do encounter a large accuracy drop, it may be caused by saturation. In this case,
you can either try reduce_range or the U8U8 format which doesn't have saturation issues.
There is no such issue on other CPU architectures (x64 with VNNI and ARM)."
(https://onnxruntime.ai/docs/performance/model-optimizations/quantization.html, "When and
why do I need to try U8U8?"). So a healthy AMD EPYC with AVX2 and no VNNI read 8.1% off
fp32 with U8S8, past the 5% limit: a false red.

Measured here with tests/tools/int8_schemes.py (the check's MLP shape, onnxruntime 1.32.0),
relative error vs fp32:
                          U8S8     U8S8 reduce_range   U8U8
  native, avx512_vnni     1.5%     1.7%                1.3%
  qemu -cpu Haswell       10.0%    1.7%                1.3%   (AVX2, no VNNI)
  qemu -cpu EPYC-Rome     10.0%    1.7%                1.3%   (AVX2, no VNNI)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from imagekit.contract.tolerances import INT8_U8S8, INT8_U8U8

# x86 VNNI: VPDPBUSD multiplies u8 x s8 and adds straight into 32 bits, no 16-bit step.
# /proc/cpuinfo names: avx512_vnni (Cascade Lake and later Xeons, Zen 4 and later), avx_vnni
# (Alder Lake clients without AVX-512, Sapphire Rapids), avx_vnni_int8 where a kernel lists
# it (Sierra Forest, Arrow Lake).
X86_VNNI = ("avx512_vnni", "avx_vnni", "avx_vnni_int8")
# Arm's int8 dot products, the VNNI analog: SDOT/UDOT (asimddp, ARMv8.2) and SMMLA/UMMLA
# (i8mm, ARMv8.6). Recorded, but not needed for the U8S8 choice on Arm: onnxruntime's Arm
# kernels widen every product to 32 bits with or without them (the ORT page above: "no such
# issue on ... ARM").
ARM_DOT = ("i8mm", "asimddp")

# The tolerance of each scheme and why: contract/tolerances.py.
U8S8_TOLERANCE = INT8_U8S8
U8U8_TOLERANCE = INT8_U8U8


@dataclass(frozen=True)
class Int8Scheme:
    activation_type: str  # onnxruntime QuantType name: always "QUInt8" (dynamic quantization)
    weight_type: str  # "QInt8" (U8S8) or "QUInt8" (U8U8)
    reduce_range: bool  # 7-bit weights; kept False: U8U8 avoids saturation at full 8 bits
    tolerance: float  # largest healthy relative error vs fp32
    why: str

    @property
    def name(self) -> str:
        return "U8S8" if self.weight_type == "QInt8" else "U8U8"


def is_arm(flags: set[str]) -> bool:
    """aarch64 lists `asimd` in its Features line (NEON); x86 flags never do."""
    return "asimd" in flags


def dot_product(flags: Iterable[str]) -> str | None:
    """The CPU's int8 dot-product flag (VNNI on x86, asimddp/i8mm on Arm), if any."""
    have = {f.lower() for f in flags}
    return next((f for f in (*X86_VNNI, *ARM_DOT) if f in have), None)


def int8_scheme(flags: Iterable[str], machine: str = "") -> Int8Scheme:
    """U8S8 where onnxruntime's kernels cannot saturate (x86 with VNNI, Arm); U8U8 on x86
    without VNNI, and wherever the flags were not read (U8U8 is exact everywhere, U8S8 is
    not). Of the two fixes the ORT page offers, U8U8 over reduce_range: it keeps 8-bit
    weights, so it is as precise as U8S8 with VNNI (1.3% vs 1.7% measured). An aarch64
    process runs Arm's kernels whatever /proc/cpuinfo says (under QEMU it is the host's)."""
    have = {f.lower() for f in flags}
    dot = dot_product(have)
    if machine == "aarch64" and not is_arm(have):
        why = "Arm (emulated; its int8 dot product not read): onnxruntime's U8S8 does not saturate"
        return Int8Scheme("QUInt8", "QInt8", False, U8S8_TOLERANCE, why)
    if is_arm(have):
        why = f"Arm ({dot or 'no int8 dot product'}): onnxruntime's U8S8 does not saturate"
        return Int8Scheme("QUInt8", "QInt8", False, U8S8_TOLERANCE, why)
    if dot:
        why = f"x86 with {dot}: VPDPBUSD adds u8 x s8 products without saturating"
        return Int8Scheme("QUInt8", "QInt8", False, U8S8_TOLERANCE, why)
    why = (
        "x86 without VNNI: U8S8 (VPMADDUBSW) saturates 16-bit sums, so U8U8"
        if have
        else "CPU flags not read: U8U8, exact on every CPU"
    )
    return Int8Scheme("QUInt8", "QUInt8", False, U8U8_TOLERANCE, why)


def int8_verdict(relative_error: float, scheme: Int8Scheme) -> tuple[bool, str]:
    """Healthy when the INT8 output is within the scheme's tolerance of fp32."""
    limit = f"limit {scheme.tolerance:.0%} for {scheme.name}: {scheme.why}"
    if not math.isfinite(relative_error):
        return False, f"INT8 output is not finite ({relative_error}); {limit}"
    if relative_error > scheme.tolerance:
        return False, f"INT8 output is {relative_error:.1%} off fp32 ({limit})"
    return True, f"INT8 {scheme.name} output {relative_error:.1%} off fp32 ({limit})"
