"""Dense spec peaks per GPU model: bf16 TFLOP/s and memory bandwidth (TB/s).

Sources: vendor datasheets as collected in shared/FACTS.md section 6. Matched against
torch.cuda.get_device_name() by substring, most specific first.
"""

from __future__ import annotations

# (name substring, bf16 dense TFLOP/s, memory TB/s)
PEAKS: tuple[tuple[str, float, float], ...] = (
    ("H200", 989.0, 4.8),
    ("H100 PCIe", 756.0, 2.0),
    ("H100", 989.0, 3.35),  # SXM
    ("B200", 2250.0, 8.0),
    ("A100", 312.0, 2.0),
    ("L40S", 362.0, 0.86),
    ("T4", 65.0, 0.32),  # fp16 only; bf16 is emulated there
)

# Healthy parts reach ~78-86% of the GEMM peak in PyTorch (FACTS.md); flag below these.
GEMM_FLOOR = 0.60
BANDWIDTH_FLOOR = 0.60


def peak_for(device_name: str) -> tuple[str, float, float] | None:
    for name, tflops, tbs in PEAKS:
        if name.lower() in device_name.lower():
            return name, tflops, tbs
    return None
