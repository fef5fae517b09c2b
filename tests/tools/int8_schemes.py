"""Quantize the self-check's INT8 model with each scheme and print the relative errors as JSON.

Run by tests/test_selfcheck_int8.py under `qemu-x86_64 -cpu <model>` to see what onnxruntime's
kernels do on a CPU without VNNI. Needs only numpy, onnx and onnxruntime (no torch): the MLP is
built with onnx's helper API in the shape `check_int8` exports (torch.nn.Linear's default
initialisation, MatMul + Add per layer, ReLU between layers).

    python int8_schemes.py WORKDIR [SIZES] [BATCH]    e.g. 256,1024,1024,64 64
"""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import QuantType, quantize_dynamic

SCHEMES = {  # name -> (weight type, reduce_range); activations are always uint8 (dynamic)
    "U8S8": (QuantType.QInt8, False),
    "U8S8-reduce-range": (QuantType.QInt8, True),
    "U8U8": (QuantType.QUInt8, False),
}


def mlp(sizes: list[int]) -> onnx.ModelProto:
    """torch.nn.Linear initialises weight and bias from U(-1/sqrt(in), 1/sqrt(in))."""
    rng = np.random.default_rng(0)
    nodes, weights, last = [], [], "x"
    for i, (a, b) in enumerate(itertools.pairwise(sizes)):
        bound = 1 / np.sqrt(a)
        w = rng.uniform(-bound, bound, (a, b)).astype(np.float32)
        bias = rng.uniform(-bound, bound, (b,)).astype(np.float32)
        weights += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(bias, f"b{i}")]
        nodes += [
            helper.make_node("MatMul", [last, f"w{i}"], [f"mm{i}"]),
            helper.make_node("Add", [f"mm{i}", f"b{i}"], [f"lin{i}"]),
        ]
        last = f"lin{i}"
        if i < len(sizes) - 2:
            nodes.append(helper.make_node("Relu", [last], [f"relu{i}"]))
            last = f"relu{i}"
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, sizes[0]])],
        [helper.make_tensor_value_info(last, TensorProto.FLOAT, [None, sizes[-1]])],
        weights,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def run(path: Path, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def cpu_features() -> dict[str, bool]:
    """What the CPU (or the emulated one) reports through CPUID, as numpy's dispatcher saw it."""
    from numpy._core._multiarray_umath import __cpu_features__ as seen

    return {name: bool(seen.get(name)) for name in ("AVX2", "AVX512F", "AVX512VNNI")}


def main(workdir: Path, sizes: list[int], batch: int) -> dict[str, object]:
    fp32_path = workdir / "fp32.onnx"
    onnx.save(mlp(sizes), str(fp32_path))
    x = np.random.default_rng(1).standard_normal((batch, sizes[0])).astype(np.float32)
    reference = run(fp32_path, x)
    scale = max(float(np.abs(reference).max()), 1e-12)
    errors = {}
    for name, (weight_type, reduce_range) in SCHEMES.items():
        path = workdir / f"{name}.onnx"
        quantize_dynamic(
            str(fp32_path), str(path), weight_type=weight_type, reduce_range=reduce_range
        )
        errors[name] = float(np.abs(run(path, x) - reference).max()) / scale
    return {
        "onnxruntime": ort.__version__,
        "cpu": cpu_features(),
        "sizes": sizes,
        "batch": batch,
        "errors": errors,
    }


if __name__ == "__main__":
    shape = [int(s) for s in (sys.argv[2] if len(sys.argv) > 2 else "256,1024,1024,64").split(",")]
    rows = int(sys.argv[3]) if len(sys.argv) > 3 else 64
    print(json.dumps(main(Path(sys.argv[1]), shape, rows)))
