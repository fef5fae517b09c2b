"""onnx, int8, tensorrt: export with torch.onnx, run with onnxruntime on the provider this
host should use, quantize to INT8, and build a TensorRT engine from the same file."""

from __future__ import annotations

import contextlib
import itertools
import os
import platform
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from imagekit.contract import labels as label
from imagekit.contract.checks import CheckResult, failed, passed, skipped
from imagekit.contract.tolerances import ONNX_VS_TORCH, TENSORRT_VS_TORCH
from imagekit.selfcheck.probes.results import features
from imagekit.selfcheck.readers.cpuinfo import read_cpu
from imagekit.selfcheck.readers.promises import labels
from imagekit.selfcheck.verdicts.int8 import dot_product, int8_scheme, int8_verdict
from imagekit.selfcheck.verdicts.rules import (
    CPU,
    TRT,
    differs,
    provider_errors,
    provider_verdict,
    providers_to_ask,
    relative_error,
)


def _mlp(torch: Any, sizes: tuple[int, ...], batch: int) -> tuple[Any, Any]:
    torch.manual_seed(0)
    layers: list[Any] = []
    for a, b in itertools.pairwise(sizes):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1]).eval(), torch.randn(batch, sizes[0])


def export(torch: Any, model: Any, x: Any, path: Path) -> str:
    try:
        torch.onnx.export(model, (x,), str(path), dynamo=True, input_names=["x"])
        return "dynamo"
    except Exception:  # older torch, or onnxscript missing: the TorchScript exporter
        torch.onnx.export(model, (x,), str(path), dynamo=False, input_names=["x"])
        return "torchscript"


@contextlib.contextmanager
def captured_stderr() -> Iterator[list[str]]:
    """onnxruntime's C++ log goes to file descriptor 2, not sys.stderr: catch it there."""
    out: list[str] = []
    with tempfile.TemporaryFile(mode="w+b") as sink:
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            yield out
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            text = sink.read().decode(errors="replace")
            os.write(2, text.encode())  # still in the check's log
            out.append(text)


def _preload_tensorrt() -> str:
    """ORT's TensorRT provider dlopens libnvinfer: with the pip wheels that works only once
    the tensorrt package has loaded its libraries into the process (ORT's TensorRT EP docs)."""
    try:
        import tensorrt

        return str(tensorrt.__version__)
    except Exception as exc:
        return f"not loaded: {type(exc).__name__}: {exc}"


def check_onnx(workdir: str) -> CheckResult:
    import torch

    try:
        import onnxruntime as ort
    except ImportError:
        return skipped("onnxruntime is not installed (features onnx and onnx-tensorrt add it)")
    promise = labels()
    gpu = torch.cuda.is_available()
    promised = features(promise) & {"onnx", "onnx-tensorrt"}
    want_trt = gpu and "onnx-tensorrt" in promised
    model, x = _mlp(torch, (16, 32, 4), 8)
    path = Path(workdir) / "model.onnx"
    exporter = export(torch, model, x, path)
    available = ort.get_available_providers()
    asked = providers_to_ask(available, want_trt)
    m: dict[str, Any] = {"exporter": exporter, "onnxruntime": ort.__version__}
    if want_trt:
        m["tensorrt_preload"] = _preload_tensorrt()
    with captured_stderr() as log:
        session = ort.InferenceSession(str(path), providers=asked)
    ran = session.get_providers()
    out = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
    with torch.no_grad():
        error = float((torch.from_numpy(out) - model(x)).abs().max())
    m.update(
        providers_asked=asked,
        provider_ran=ran[0],
        max_error_vs_torch=error,
        tensorrt_ran=ran[0] == TRT,
        device="cpu" if ran[0] == CPU else "cuda",
    )
    gpu_promised = bool(promised) and promise.get(label.CUDA, "cpu") != "cpu"
    judged = provider_verdict(
        gpu, available, ran, gpu_promised, want_trt, provider_errors("".join(log))
    )
    if not judged.ok:
        return failed(judged.reason, **m)
    if differs(error, ONNX_VS_TORCH):
        return failed(f"onnxruntime ({ran[0]}) differs from torch by {error:g}", **m)
    return passed(judged.reason, **m)


def check_int8(workdir: str) -> CheckResult:
    """INT8 dynamic quantization with onnxruntime's tools: close to fp32, smaller, faster.
    The scheme follows the CPU (int8.int8_scheme): U8S8 saturates on x86 without VNNI."""
    import torch

    try:
        import onnxruntime as ort
        from onnxruntime.quantization import QuantType, quantize_dynamic
    except ImportError as exc:
        return skipped(f"onnxruntime's quantization tools are not importable: {exc}")
    flags = read_cpu().get("flags", [])
    scheme = int8_scheme(flags, platform.machine())
    model, x = _mlp(torch, (256, 1024, 1024, 64), 64)
    paths = {name: Path(workdir, name, "m.onnx") for name in ("export", "fp32", "int8")}
    for path in paths.values():
        path.parent.mkdir()
    exporter = export(torch, model, x, paths["export"])
    fp32_path, int8_path = _without_shape_hints(paths["export"], paths["fp32"]), paths["int8"]
    quantize_dynamic(
        str(fp32_path),
        str(int8_path),
        weight_type=getattr(QuantType, scheme.weight_type),
        reduce_range=scheme.reduce_range,
    )
    outputs, seconds = {}, {}
    for name, path in (("fp32", fp32_path), ("int8", int8_path)):
        session = ort.InferenceSession(str(path), providers=[CPU])
        feed = {session.get_inputs()[0].name: x.numpy()}
        outputs[name], seconds[name] = _timed_run(session, feed)
    diff = float(abs(outputs["int8"] - outputs["fp32"]).max())
    error = relative_error(diff, float(abs(outputs["fp32"]).max()))
    m: dict[str, Any] = {
        "device": "cpu",
        "exporter": exporter,
        "int8_scheme": scheme.name,
        "reduce_range": scheme.reduce_range,
        "tolerance": scheme.tolerance,
        "cpu_vnni": dot_product(flags) is not None,
        "cpu_int8_dot_product": dot_product(flags),
        "relative_error": round(error, 4),
        "size_ratio_fp32_vs_int8": round(_size(fp32_path.parent) / _size(int8_path.parent), 2),
        "speedup_int8_vs_fp32": round(seconds["fp32"] / seconds["int8"], 2),
    }
    ok, reason = int8_verdict(error, scheme)
    return passed(reason, **m) if ok else failed(reason, **m)


def _without_shape_hints(src: Path, dest: Path) -> Path:
    """The exported model without its value_info, in one file. The quantizer re-runs ONNX
    shape inference in strict mode, and some exporter versions leave value_info that it
    rejects ("Inferred shape and existing shape differ", torch 2.11 with ORT 1.30 on an
    H100 here); inference recomputes every shape from the weights anyway."""
    import onnx

    model = onnx.load(str(src))
    del model.graph.value_info[:]
    onnx.save(model, str(dest))
    return dest


def _size(folder: Path) -> int:
    """A model's bytes with its external data files (the dynamo exporter writes weights
    beside the .onnx file)."""
    return sum(f.stat().st_size for f in folder.iterdir())


def _timed_run(session: Any, feed: dict[str, Any]) -> tuple[Any, float]:
    out = session.run(None, feed)[0]
    start = time.perf_counter()
    for _ in range(20):
        session.run(None, feed)
    return out, (time.perf_counter() - start) / 20


def check_tensorrt(workdir: str) -> CheckResult:
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
    model, x = _mlp(torch, (16, 32, 4), 8)
    path = Path(workdir) / "model.onnx"
    export(torch, model, x, path)
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, logger)
    # From the file, not bytes: larger exports keep their weights in external data files
    # beside the model, which only the file API resolves.
    if not parser.parse_from_file(str(path)):
        return failed(f"TensorRT could not parse the ONNX model: {parser.get_error(0)}")
    serialized = builder.build_serialized_network(network, builder.create_builder_config())
    if serialized is None:
        return failed("TensorRT could not build an engine for the model (see the log)")
    engine = trt.Runtime(logger).deserialize_cuda_engine(serialized)
    out = _run_engine(torch, trt, engine, x)
    with torch.no_grad():
        error = float((out.cpu() - model(x)).abs().max())
    m = {"device": "cuda", "tensorrt": trt.__version__, "max_error_vs_torch": error}
    if differs(error, TENSORRT_VS_TORCH):
        return failed(f"the TensorRT engine differs from torch by {error:g}", **m)
    return passed(**m)


def _run_engine(torch: Any, trt: Any, engine: Any, x: Any) -> Any:
    context = engine.create_execution_context()
    inp = x.cuda().contiguous()
    out = torch.empty(x.shape[0], 4, device="cuda")
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        is_input = engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
        context.set_tensor_address(name, (inp if is_input else out).data_ptr())
    stream = torch.cuda.Stream()
    context.execute_async_v3(stream.cuda_stream)
    stream.synchronize()
    return out
