"""The checks. Each runs in its own process (see runner.py) and returns a plain dict:

    {"status": "passed" | "failed" | "skipped", "reason": str, "measurements": {...}}

Standard library and torch only, plus optional packages found at run time. GPU paths run
where torch.cuda.is_available(); CPU paths elsewhere, so a CPU container proves what it can.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from imagekit.selfcheck.peaks import BANDWIDTH_FLOOR, GEMM_FLOOR, peak_for

Result = dict[str, Any]
LABELS_FILE = Path("/etc/imagekit/labels.json")


def passed(reason: str = "", **measurements: Any) -> Result:
    return {"status": "passed", "reason": reason, "measurements": measurements}


def failed(reason: str, **measurements: Any) -> Result:
    return {"status": "failed", "reason": reason, "measurements": measurements}


def skipped(reason: str, **measurements: Any) -> Result:
    return {"status": "skipped", "reason": reason, "measurements": measurements}


def fault(name: str) -> bool:
    """Fault injection for the runner's own tests (IMAGEKIT_SELFCHECK_FAULT=ddp-hang,...)."""
    return name in os.environ.get("IMAGEKIT_SELFCHECK_FAULT", "").split(",")


def labels() -> dict[str, str]:
    """What the image promises: $IMAGEKIT_LABELS (set by `imagekit test` from the image's
    real labels), else the copy baked into the image."""
    raw = os.environ.get("IMAGEKIT_LABELS")
    if raw:
        return dict(json.loads(raw))
    if LABELS_FILE.is_file():
        return dict(json.loads(LABELS_FILE.read_text()))
    return {}


def timed(fn: Callable[[], Any], repeat: int, sync: Callable[[], None]) -> float:
    fn()
    sync()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    sync()
    return (time.perf_counter() - start) / repeat


def _sync(torch: Any, device: str) -> Callable[[], None]:
    return torch.cuda.synchronize if device == "cuda" else (lambda: None)


# -- stack ------------------------------------------------------------------------------


def driver_version() -> str | None:
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return None
    for word in text.split():
        if word.count(".") >= 1 and word.replace(".", "").isdigit():
            return word
    return None


def _vtuple(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split(".") if p.isdigit())


def cgroup_cpus() -> float | None:
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def check_stack() -> Result:
    import torch

    promise = labels()
    problems: list[str] = []
    m: dict[str, Any] = {"torch": torch.__version__, "torch_cuda": torch.version.cuda}
    base = torch.__version__.split("+")[0]
    if promise.get("io.imagekit.torch") and promise["io.imagekit.torch"] != base:
        problems.append(
            f"label io.imagekit.torch promises torch {promise['io.imagekit.torch']}, "
            f"the image has torch {base}"
        )
    want_cuda = promise.get("io.imagekit.cuda")
    have_cuda = ".".join((torch.version.cuda or "cpu").split(".")[:2])
    if want_cuda and want_cuda != have_cuda:
        problems.append(
            f"label io.imagekit.cuda promises CUDA {want_cuda}, torch was built for {have_cuda}"
        )
    problems += _environment(torch, m)
    if torch.cuda.is_available():
        problems += _gpu_stack(torch, promise, m)
    return failed("; ".join(problems), **m) if problems else passed(**m)


def _environment(torch: Any, m: dict[str, Any]) -> list[str]:
    shm = os.statvfs("/dev/shm")
    m["shm_bytes"] = shm.f_blocks * shm.f_frsize
    m["omp_num_threads"] = os.environ.get("OMP_NUM_THREADS")
    m["torch_threads"] = torch.get_num_threads()
    m["cpus_visible"] = len(os.sched_getaffinity(0))
    m["cgroup_cpus"] = cgroup_cpus()
    m["nccl_env"] = {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")}
    m["tf32_env"] = {
        k: os.environ[k]
        for k in ("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "NVIDIA_TF32_OVERRIDE")
        if k in os.environ
    }
    m["matmul_allow_tf32"] = bool(torch.backends.cuda.matmul.allow_tf32)
    problems = []
    if m["shm_bytes"] < 1 << 30:
        m["warning"] = (
            f"/dev/shm is {m['shm_bytes'] >> 20} MiB: NCCL and DataLoader workers "
            "need GBs; run with --ipc=host or --shm-size=8g"
        )
    limit = m["cgroup_cpus"]
    if m["omp_num_threads"] and limit and int(m["omp_num_threads"]) > max(1, math.floor(limit)):
        problems.append(
            f"OMP_NUM_THREADS={m['omp_num_threads']} exceeds the {limit:g} CPUs the cgroup allows"
        )
    return problems


def _gpu_stack(torch: Any, promise: dict[str, str], m: dict[str, Any]) -> list[str]:
    problems = []
    major, minor = torch.cuda.get_device_capability()
    arch = f"sm_{major}{minor}"
    m.update(
        gpu=torch.cuda.get_device_name(),
        gpus=torch.cuda.device_count(),
        arch=arch,
        arch_list=torch.cuda.get_arch_list(),
        cudnn=torch.backends.cudnn.version(),
        driver=driver_version(),
    )
    try:
        m["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception as exc:  # torch without NCCL (e.g. some builds): report, do not fail
        m["nccl"] = f"unavailable ({exc})"
    ptx_ok = any(
        a.startswith("compute_") and int(a[8:]) <= major * 10 + minor for a in m["arch_list"]
    )
    if arch not in m["arch_list"] and not ptx_ok:
        problems.append(f"this GPU is {arch}, torch is compiled for {' '.join(m['arch_list'])}")
    need = promise.get("io.imagekit.min-driver")
    if need and m["driver"] and _vtuple(m["driver"]) < _vtuple(need):
        problems.append(
            f"driver {m['driver']} is older than {need}, the minimum for CUDA "
            f"{promise.get('io.imagekit.cuda')}"
        )
    return problems


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


def check_amp() -> Result:
    import torch

    if fault("amp-crash"):
        os.kill(os.getpid(), signal.SIGSEGV)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    runs = {"fp32": (torch.float32, False), "bf16": (torch.bfloat16, False)}
    if device == "cuda":
        runs["fp16"] = (torch.float16, True)
    losses = {name: _train(torch, device, dt, 30, sc) for name, (dt, sc) in runs.items()}
    m: dict[str, Any] = {
        "device": device,
        **{f"final_loss_{k}": round(v[-1], 5) for k, v in losses.items()},
    }
    problems = []
    for name, values in losses.items():
        if not all(math.isfinite(v) for v in values):
            problems.append(f"{name} loss is not finite")
        elif values[-1] > 0.7 * values[0]:
            problems.append(f"{name} loss did not fall ({values[0]:.4f} -> {values[-1]:.4f})")
        elif abs(values[-1] - losses["fp32"][-1]) > 0.05 + 0.1 * losses["fp32"][-1]:
            problems.append(
                f"{name} final loss {values[-1]:.4f} is far from fp32 {losses['fp32'][-1]:.4f}"
            )
    if device == "cuda":
        m["speedup_bf16_vs_fp32"] = round(_amp_speed(torch), 2)
    return failed("; ".join(problems), **m) if problems else passed(**m)


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


# -- ddp --------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def check_ddp() -> Result:
    import torch

    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # launched by torchrun
        return ddp_worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), None)
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    backend, world = ("nccl", gpus) if gpus >= 2 else ("gloo", 2)
    port = free_port()
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=_ddp_entry, args=(r, world, backend, port, queue)) for r in range(world)
    ]
    for p in procs:
        p.start()
    results = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    result = min(results, key=lambda r: r["status"] != "failed")  # a failed rank wins
    if gpus == 1:
        result["measurements"]["note"] = (
            "1 GPU: NCCL runs one process per GPU, so 2 ranks used gloo"
        )
    return result


def _ddp_entry(rank: int, world: int, backend: str, port: int, queue: Any) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        queue.put(ddp_worker(rank, world, backend))
    except Exception as exc:  # report, so rank 0's queue.get() does not wait forever
        queue.put(failed(f"rank {rank}: {type(exc).__name__}: {exc}"))


def ddp_worker(rank: int, world: int, backend: str | None) -> Result:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    device = f"cuda:{rank % max(1, torch.cuda.device_count())}" if backend == "nccl" else "cpu"
    if backend == "nccl":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, rank=rank, world_size=world)
    try:
        torch.manual_seed(0)
        model = DistributedDataParallel(
            torch.nn.Linear(32, 8).to(device), device_ids=[device] if backend == "nccl" else None
        )
        torch.manual_seed(rank + 1)  # each rank its own data
        model(torch.randn(16, 32, device=device)).square().mean().backward()
        if fault("ddp-hang") and rank == 1:
            time.sleep(3600)  # rank 0 waits in the collective below: a real hang
        grads = torch.cat([p.grad.flatten() for p in model.parameters()])
        gathered = [torch.zeros_like(grads) for _ in range(world)]
        dist.all_gather(gathered, grads)
        spread = max(float((g - gathered[0]).abs().max()) for g in gathered)
        m: dict[str, Any] = {"backend": backend, "world_size": world, "max_grad_difference": spread}
        if backend == "nccl":
            m["allreduce_busbw_GBps"] = round(_busbw(torch, dist, world, device), 1)
        if spread > 1e-6:
            return failed(f"gradients differ across ranks by {spread:g} after a DDP step", **m)
        return passed(**m)
    finally:
        dist.destroy_process_group()


def _busbw(torch: Any, dist: Any, world: int, device: str) -> float:
    tensor = torch.ones(64 * 1024 * 1024, device=device)  # 256 MB of fp32
    seconds = timed(lambda: dist.all_reduce(tensor), 10, torch.cuda.synchronize)
    return tensor.numel() * 4 * 2 * (world - 1) / world / seconds / 1e9


# -- flash ------------------------------------------------------------------------------


def check_flash() -> Result:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and torch.cuda.get_device_capability() < (8, 0):
        return skipped(
            f"the CUDA flash backend needs sm80+; this GPU is "
            f"sm_{''.join(map(str, torch.cuda.get_device_capability()))}"
        )
    dtype, tol = (torch.bfloat16, 2e-2) if device == "cuda" else (torch.float32, 1e-4)
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 8, 1024, 64, device=device, dtype=dtype) for _ in range(3))
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def run(backend: Any) -> Callable[[], Any]:
        def go() -> Any:
            with sdpa_kernel(backend):
                return sdpa(q, k, v, is_causal=True)

        return go

    try:
        flash = run(SDPBackend.FLASH_ATTENTION)()
    except RuntimeError as exc:
        return failed(f"SDPA's flash backend is unavailable on {device}: {exc}")
    math_out = run(SDPBackend.MATH)()
    error = float((flash.float() - math_out.float()).abs().max())
    sync = _sync(torch, device)
    speed = timed(run(SDPBackend.MATH), 3, sync) / timed(run(SDPBackend.FLASH_ATTENTION), 3, sync)
    m: dict[str, Any] = {
        "device": device,
        "dtype": str(dtype).removeprefix("torch."),
        "max_error_vs_math": error,
        "speedup_vs_math": round(speed, 2),
    }
    m.update(_flash_attn_package(torch, q, k, v, math_out, tol))
    if error > tol:
        return failed(f"flash vs math max error {error:g} > {tol:g}", **m)
    if m.get("flash_attn_error"):
        return failed(str(m["flash_attn_error"]), **m)
    return passed(**m)


def _flash_attn_package(torch: Any, q: Any, k: Any, v: Any, ref: Any, tol: float) -> dict[str, Any]:
    try:
        import flash_attn
        from flash_attn import flash_attn_func
    except ImportError:
        return {"flash_attn_package": "not installed"}
    if q.device.type != "cuda":
        return {"flash_attn_package": "installed; needs a GPU"}
    out = flash_attn_func(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), causal=True)
    error = float((out.transpose(1, 2).float() - ref.float()).abs().max())
    result: dict[str, Any] = {
        "flash_attn_package": flash_attn.__version__,
        "flash_attn_max_error": error,
    }
    if error > tol:
        result["flash_attn_error"] = f"flash_attn max error {error:g} > {tol:g}"
    return result


# -- onnx, tensorrt ---------------------------------------------------------------------

PROVIDERS = ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")


def _small_model(torch: Any, workdir: str) -> tuple[Any, Any, Path, str]:
    torch.manual_seed(0)
    layers = [torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)]
    model = torch.nn.Sequential(*layers).eval()
    x = torch.randn(8, 16)
    path = Path(workdir) / "model.onnx"
    return model, x, path, _export(torch, model, x, path)


def _export(torch: Any, model: Any, x: Any, path: Path) -> str:
    try:
        torch.onnx.export(model, (x,), str(path), dynamo=True, input_names=["x"])
        return "dynamo"
    except Exception:  # older torch, or onnxscript missing: the TorchScript exporter
        torch.onnx.export(model, (x,), str(path), dynamo=False, input_names=["x"])
        return "torchscript"


def check_onnx(workdir: str) -> Result:
    """Export with torch.onnx, run with onnxruntime asking TensorRT, then CUDA, then CPU."""
    import torch

    try:
        import onnxruntime as ort
    except ImportError:
        return skipped("onnxruntime is not installed (feature onnx-tensorrt adds it)")
    model, x, path, exporter = _small_model(torch, workdir)
    wanted = [p for p in PROVIDERS if p in ort.get_available_providers()]
    session = ort.InferenceSession(str(path), providers=wanted)
    ran = session.get_providers()[0]  # what really ran: ORT falls back silently
    out = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    with torch.no_grad():
        error = float((torch.from_numpy(out) - model(x)).abs().max())
    m: dict[str, Any] = {
        "exporter": exporter,
        "providers_asked": wanted,
        "provider_ran": ran,
        "max_error_vs_torch": error,
        "tensorrt_ran": ran == PROVIDERS[0],
    }
    if error > 1e-3:
        return failed(f"onnxruntime ({ran}) differs from torch by {error:g}", **m)
    return passed(**m)


def check_tensorrt(workdir: str) -> Result:
    """Build and run a TensorRT engine from the exported ONNX model, without onnxruntime."""
    import torch

    try:
        import tensorrt as trt
    except ImportError:
        return skipped(
            "the tensorrt package is not installed (feature onnx-tensorrt adds "
            "tensorrt-cu12/-cu13 on CUDA cells)"
        )
    if not torch.cuda.is_available():
        return skipped(f"TensorRT {trt.__version__} needs an NVIDIA GPU (Turing or newer)")
    model, x, path, _ = _small_model(torch, workdir)
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(path.read_bytes()):
        return failed(f"TensorRT could not parse the ONNX model: {parser.get_error(0)}")
    serialized = builder.build_serialized_network(network, builder.create_builder_config())
    engine = trt.Runtime(logger).deserialize_cuda_engine(serialized)
    context = engine.create_execution_context()
    inp = x.cuda().contiguous()
    out = torch.empty(x.shape[0], 4, device="cuda")
    context.set_tensor_address(engine.get_tensor_name(0), inp.data_ptr())
    context.set_tensor_address(engine.get_tensor_name(1), out.data_ptr())
    stream = torch.cuda.Stream()
    context.execute_async_v3(stream.cuda_stream)
    stream.synchronize()
    with torch.no_grad():
        error = float((out.cpu() - model(x)).abs().max())
    m = {"tensorrt": trt.__version__, "max_error_vs_torch": error}
    if error > 1e-2:
        return failed(f"the TensorRT engine differs from torch by {error:g}", **m)
    return passed(**m)


# -- perf -------------------------------------------------------------------------------


def check_perf() -> Result:
    import torch

    if not torch.cuda.is_available():
        return skipped("no GPU: GEMM and bandwidth are measured on GPUs only")
    name = torch.cuda.get_device_name()
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    gemm = 2 * n**3 / timed(lambda: a @ b, 20, torch.cuda.synchronize) / 1e12
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    bandwidth = 2 * src.numel() / timed(lambda: dst.copy_(src), 20, torch.cuda.synchronize) / 1e12
    m: dict[str, Any] = {
        "gpu": name,
        "bf16_gemm_tflops": round(gemm, 1),
        "copy_tbps": round(bandwidth, 2),
    }
    peak = peak_for(name)
    if peak is None:
        return passed(f"no spec peak known for {name}; measured only", **m)
    m.update(
        peak_model=peak[0],
        gemm_vs_peak=round(gemm / peak[1], 3),
        bandwidth_vs_peak=round(bandwidth / peak[2], 3),
    )
    low = [
        f"{what} at {frac:.0%} of {peak[0]} peak"
        for what, frac, floor in (
            ("bf16 GEMM", m["gemm_vs_peak"], GEMM_FLOOR),
            ("memory copy", m["bandwidth_vs_peak"], BANDWIDTH_FLOOR),
        )
        if frac < floor
    ]
    return failed("; ".join(low) + " (below the healthy floor)", **m) if low else passed(**m)


CHECKS: dict[str, Callable[..., Result]] = {
    "stack": check_stack,
    "amp": check_amp,
    "ddp": check_ddp,
    "flash": check_flash,
    "onnx": check_onnx,
    "tensorrt": check_tensorrt,
    "perf": check_perf,
}
