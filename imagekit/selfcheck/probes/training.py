"""amp, checkpoint and compile: a small training step in mixed precision, with activation
checkpointing, and through torch.compile (inductor), each compared with plain eager fp32."""

from __future__ import annotations

import math
import os
import signal
import traceback
from collections.abc import Callable
from typing import Any

from imagekit.contract.checks import CheckResult, failed, passed, verdict
from imagekit.contract.tolerances import (
    AMP_LOSS_ABS,
    AMP_LOSS_FALL,
    AMP_LOSS_REL,
    COMPILE_GRAD_RTOL,
)
from imagekit.selfcheck.probes.results import device_of, fault, timed
from imagekit.selfcheck.verdicts.rules import compile_hint, gradients_match

# -- amp --------------------------------------------------------------------------------


def _train(torch: Any, device: str, dtype: Any, steps: int, scaler: bool) -> list[float]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 1)
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(512, 64, device=device)
    y = x[:, :1] * 0.5 + x[:, 1:2].sin()
    grad_scaler = torch.amp.GradScaler(device) if scaler else None
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device, dtype=dtype, enabled=dtype != torch.float32):
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
        if grad_scaler:
            grad_scaler.scale(loss).backward()
            grad_scaler.step(opt)
            grad_scaler.update()
        else:
            loss.backward()
            opt.step()
        losses.append(float(loss))
    return losses


def loss_problems(losses: dict[str, list[float]]) -> list[str]:
    """Every precision's loss is finite, falls, and ends near fp32's."""
    problems = []
    for name, values in losses.items():
        if not all(math.isfinite(v) for v in values):
            problems.append(f"{name} loss is not finite")
        elif values[-1] > AMP_LOSS_FALL * values[0]:
            problems.append(f"{name} loss did not fall ({values[0]:.4f} -> {values[-1]:.4f})")
        elif (
            abs(values[-1] - losses["fp32"][-1]) > AMP_LOSS_ABS + AMP_LOSS_REL * losses["fp32"][-1]
        ):
            problems.append(
                f"{name} final loss {values[-1]:.4f} is far from fp32 {losses['fp32'][-1]:.4f}"
            )
    return problems


def check_amp() -> CheckResult:
    import torch

    if fault("amp-crash"):
        os.kill(os.getpid(), signal.SIGSEGV)
    device = device_of(torch)
    runs = {"fp32": (torch.float32, False), "bf16": (torch.bfloat16, False)}
    if device == "cuda":
        runs["fp16"] = (torch.float16, True)
    losses = {name: _train(torch, device, dt, 30, sc) for name, (dt, sc) in runs.items()}
    m: dict[str, Any] = {
        "device": device,
        **{f"final_loss_{k}": round(v[-1], 5) for k, v in losses.items()},
    }
    if device == "cuda":
        m["speedup_bf16_vs_fp32"] = round(_amp_speed(torch), 2)
    return verdict(loss_problems(losses), **m)


def _amp_speed(torch: Any) -> float:
    a = torch.randn(4096, 4096, device="cuda")
    b = torch.randn(4096, 4096, device="cuda")

    def step(dtype: Any) -> Callable[[], Any]:
        def run() -> Any:
            with torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32):
                return a @ b

        return run

    torch.backends.cuda.matmul.allow_tf32 = False  # a true fp32 baseline
    fp32 = timed(step(torch.float32), 10, torch.cuda.synchronize)
    bf16 = timed(step(torch.bfloat16), 10, torch.cuda.synchronize)
    return fp32 / bf16


# -- checkpoint ---------------------------------------------------------------------------


def _block(torch: Any, width: int) -> Any:
    return torch.nn.Sequential(
        torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width)
    )


def _grads_and_peak(torch: Any, device: str, checkpointed: bool) -> tuple[Any, int]:
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    width = 256
    blocks = torch.nn.ModuleList(_block(torch, width) for _ in range(4)).to(device)
    x = torch.randn(2048, width, device=device)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    h = x
    for block in blocks:
        h = checkpoint(block, h, use_reentrant=False) if checkpointed else block(h)
    h.square().mean().backward()
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else 0
    return torch.cat([p.grad.flatten() for p in blocks.parameters()]), peak


def check_checkpoint() -> CheckResult:
    """Activation checkpointing gives the same gradients, and on a GPU a lower peak memory."""
    import torch

    device = device_of(torch)
    plain, plain_peak = _grads_and_peak(torch, device, False)
    ckpt, ckpt_peak = _grads_and_peak(torch, device, True)
    diff = float((plain - ckpt).abs().max())
    m: dict[str, Any] = {"device": device, "max_grad_difference": diff}
    problems = []
    if not gradients_match(diff, float(plain.abs().max())):
        problems.append(f"checkpointed gradients differ from plain ones by {diff:g}")
    if device == "cuda":
        m.update(peak_mib_plain=plain_peak >> 20, peak_mib_checkpointed=ckpt_peak >> 20)
        if ckpt_peak >= plain_peak:
            problems.append(
                f"checkpointing did not lower peak memory ({ckpt_peak >> 20} MiB vs "
                f"{plain_peak >> 20} MiB)"
            )
    return verdict(problems, **m)


# -- compile ------------------------------------------------------------------------------


def _step(torch: Any, model: Any, x: Any, y: Any) -> tuple[float, Any]:
    model.zero_grad(set_to_none=True)
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    return float(loss), torch.cat([p.grad.flatten() for p in model.parameters()])


def _compile_in_process(torch: Any) -> None:
    """Inductor compiles the C++ kernels here, one after another, instead of starting a
    pool of worker processes that each import torch again: on a small CPU host (2 cores,
    the other checks beside it) the pool's start costs more than the few kernels' g++ runs
    it would spread. The same kernels, the same g++ command lines."""
    import torch._inductor.config as inductor

    inductor.compile_threads = 1


def check_compile() -> CheckResult:
    """torch.compile (inductor) of a training step, forward and backward, against eager."""
    import torch

    device = device_of(torch)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.LayerNorm(64), torch.nn.Linear(64, 8)
    ).to(device)
    x, y = torch.randn(64, 32, device=device), torch.randn(64, 8, device=device)
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False  # compare like with like
    eager_loss, eager_grads = _step(torch, model, x, y)
    if device == "cpu":
        _compile_in_process(torch)
    try:
        compiled = torch.compile(model)
        loss, grads = _step(torch, compiled, x, y)
    except Exception as exc:
        text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        hint = compile_hint(text)
        return failed(f"torch.compile failed: {text[-600:]}" + (f" ({hint})" if hint else ""))
    diff = float((grads - eager_grads).abs().max())
    m: dict[str, Any] = {
        "device": device,
        "backend": "inductor",
        "loss_difference": abs(loss - eager_loss),
        "max_grad_difference": diff,
    }
    if not gradients_match(diff, float(eager_grads.abs().max()), rtol=COMPILE_GRAD_RTOL):
        return failed(f"compiled gradients differ from eager by {diff:g}", **m)
    return passed(**m)
