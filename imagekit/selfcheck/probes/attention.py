"""flash: SDPA's flash-attention kernel (and the flash_attn package when installed) against an
fp64 reference, judged by the error the math kernel itself makes in the same dtype."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Callable
from typing import Any

from imagekit.contract.checks import CheckResult, failed, passed, skipped
from imagekit.selfcheck.probes.results import device_of, sync_of, timed
from imagekit.selfcheck.verdicts.rules import attention_close


def check_flash() -> CheckResult:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    device = device_of(torch)
    if device == "cuda" and torch.cuda.get_device_capability() < (8, 0):
        return skipped(
            f"the CUDA flash backend needs sm80+; this GPU is "
            f"sm_{''.join(map(str, torch.cuda.get_device_capability()))}"
        )
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 8, 1024, 64, device=device, dtype=dtype) for _ in range(3))
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def run(backend: Any, *args: Any) -> Callable[[], Any]:
        def go() -> Any:
            with sdpa_kernel(backend):
                return sdpa(*(args or (q, k, v)), is_causal=True)

        return go

    try:
        flash = run(SDPBackend.FLASH_ATTENTION)()
    except RuntimeError as exc:
        return failed(f"SDPA's flash backend is unavailable on {device}: {exc}")
    # The reference in float64, so that even an fp32 kernel is judged by its own rounding.
    reference = run(SDPBackend.MATH, q.double(), k.double(), v.double())().float()
    math_error = float((run(SDPBackend.MATH)().float() - reference).abs().max())
    error = float((flash.float() - reference).abs().max())
    name = str(dtype).removeprefix("torch.")
    ok, limit = attention_close(error, math_error, name)
    sync = sync_of(torch, device)
    speed = timed(run(SDPBackend.MATH), 3, sync) / timed(run(SDPBackend.FLASH_ATTENTION), 3, sync)
    m: dict[str, Any] = {
        "device": device,
        "dtype": name,
        "max_error_vs_fp64": error,
        "math_kernel_error_vs_fp64": math_error,
        "speedup_vs_math": round(speed, 2),
    }
    m.update(_flash_attn_package(torch, q, k, v, reference, math_error, name))
    if not ok:
        return failed(f"flash vs fp64 max error {error:g} > {limit:g}", **m)
    if m.get("flash_attn_error"):
        return failed(str(m["flash_attn_error"]), **m)
    return passed(**m)


def flash_attn_installed() -> str | None:
    """The installed flash-attn distribution's version, or None when it is absent."""
    try:
        return importlib.metadata.version("flash-attn")
    except importlib.metadata.PackageNotFoundError:
        return "unknown" if importlib.util.find_spec("flash_attn") else None


def _flash_attn_package(
    torch: Any, q: Any, k: Any, v: Any, ref: Any, math_error: float, dtype: str
) -> dict[str, Any]:
    version = flash_attn_installed()
    if version is None:
        return {"flash_attn_package": "not installed"}
    try:  # installed but broken (undefined symbol, ABI mismatch) is a failure, not absence
        from flash_attn import flash_attn_func
    except Exception as exc:
        return {
            "flash_attn_package": f"{version} (import failed)",
            "flash_attn_error": f"flash_attn {version} is installed but does not import: "
            f"{type(exc).__name__}: {exc}",
        }
    if q.device.type != "cuda":
        return {"flash_attn_package": f"{version}; needs a GPU"}
    out = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True)
    error = float((out.transpose(1, 2).float() - ref).abs().max())
    ok, limit = attention_close(error, math_error, dtype)
    result: dict[str, Any] = {"flash_attn_package": version, "flash_attn_max_error": error}
    if not ok:
        result["flash_attn_error"] = f"flash_attn max error {error:g} > {limit:g}"
    return result
