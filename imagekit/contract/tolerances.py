"""The numeric tolerances the self-check's checks judge by, each once, with why it is what
it is. A measurement beyond its tolerance fails the check (the verdicts: selfcheck/rules.py,
selfcheck/int8.py, selfcheck/nodes_check.py)."""

from __future__ import annotations

# -- distributed -----------------------------------------------------------------------------
# DDP's all-reduce hands every rank the same summed gradient and the same optimizer step, so
# ranks agree to the bit in practice; 1e-6 (absolute, fp32 gradients of order 1e-1) allows
# reduction-order noise only. Used by the single-node ddp check and the multi-node one, for
# gradients and for the parameters after the step.
DDP_GRAD_SPREAD = 1e-6

# -- training --------------------------------------------------------------------------------
# Activation checkpointing recomputes the same forward in the same dtype: its gradients equal
# the plain ones up to kernel-order noise, relative to the largest gradient (at least 1).
CHECKPOINT_GRAD_RTOL = 1e-4
# torch.compile (inductor) fuses and reorders the fp32 arithmetic: a looser 1e-3 relative to
# the largest gradient, still far below what a miscompiled kernel is off by.
COMPILE_GRAD_RTOL = 1e-3
# AMP: every precision's loss must fall to 70% of its first value in the check's steps, and
# end within 0.05 + 10% of fp32's final loss (bf16 and fp16 round the activations).
AMP_LOSS_FALL = 0.7
AMP_LOSS_ABS = 0.05
AMP_LOSS_REL = 0.1

# -- attention -------------------------------------------------------------------------------
# A fused attention kernel against a float64 reference: within 3x the error the math kernel
# makes in the same dtype, plus 8 ulps of the dtype (selfcheck/rules.attention_close says
# why a fixed atol fails healthy GPUs on long sequences).
ATTENTION_MATH_FACTOR = 3.0
ATTENTION_ULPS = 8.0

# -- inference -------------------------------------------------------------------------------
# onnxruntime runs the exported fp32 MLP in fp32: on the CPU its output matches torch's to fp32
# rounding, orders of magnitude below 1e-3 absolute, which leaves a GPU provider room for
# other kernels and summation orders; an operator exported or run wrongly is off by far more.
ONNX_VS_TORCH = 1e-3
# TensorRT's builder may choose TF32 tactics on Ampere and later (its default builder config
# allows them: 10 mantissa bits, ~1e-3 relative per product), so ten times the ONNX bound.
TENSORRT_VS_TORCH = 1e-2
# Dynamic INT8 (per-tensor weights, dynamic uint8 activations) of the check's MLP stays within
# 1.3-1.7% of fp32 on every non-saturating path measured (selfcheck/int8.py has the CPUs and
# the onnxruntime page); 5% of the output range flags a broken kernel (or U8S8 saturation,
# ~10%), not quantization noise.
INT8_U8S8 = 0.05
# U8U8 keeps 8-bit weights (same step as U8S8, unlike reduce_range's 7 bits) and never
# saturates: 1.3% natively and under emulation without VNNI, so the same 5% holds.
INT8_U8U8 = 0.05

# -- perf --------------------------------------------------------------------------------------
# Warm-up is over when two consecutive timings agree within 3%: clocks have ramped up.
WARM_TIMINGS_AGREE = 0.03
