"""The fused elementwise kernels the Triton backends (CUDA, ROCm, XPU) put into core's models.

Contract of `attach_fused_kernels(model)`: every `RMSNorm` computes through `kernels.rms_norm` (the
residual add and the norm in one launch), every SiLU `GatedMLP` through `kernels.act_mul.silu_mul`, and
every attention layer that takes a `rotary_kernel` through `kernels.rotary.rotary_inplace` (q and k of a
layer in one launch, in place). Each replaces several torch launches per layer with one, with the same
arithmetic up to the rounding of its intermediates (float32 inside, rounded once). Other norms and
activations keep their torch ops.
"""

from __future__ import annotations

import torch


def attach_fused_kernels(model: torch.nn.Module) -> dict[str, int]:
    """Attach the fused kernels (see the module docstring); returns kernel name -> number of modules."""
    from tgi.backends.triton_common.kernels.act_mul import silu_mul
    from tgi.backends.triton_common.kernels.rms_norm import rms_norm
    from tgi.backends.triton_common.kernels.rotary import rotary_inplace
    from tgi.core.models.layers import GatedMLP, RMSNorm

    counts = {"triton rms norm": 0, "triton silu mul": 0, "triton rotary": 0}
    for module in model.modules():
        if isinstance(module, RMSNorm):
            module.norm_kernel = rms_norm
            counts["triton rms norm"] += 1
        elif isinstance(module, GatedMLP) and module.hidden_act in ("silu", "swish"):
            module.act_mul_kernel = silu_mul
            counts["triton silu mul"] += 1
        elif "rotary_kernel" in dir(type(module)):
            module.rotary_kernel = rotary_inplace
            counts["triton rotary"] += 1
    return counts
