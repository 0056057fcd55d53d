"""Fused elementwise ops for core's models on the CPU (see `tgi.backends.cpu.native.fused`).

A decode step of a small model is a few hundred tiny tensors: at batch 1 each torch op costs more in
dispatch than in arithmetic. RMSNorm (+ residual add), the rotary embedding of q and k, and SiLU(gate) * up
become one native call each, with the rounding of the ops they replace.
"""

from __future__ import annotations

import torch

from tgi.core.models.layers import GatedMLP, RMSNorm


def _norm_kernel(ops):
    rms_norm = ops.rms_norm

    def kernel(x, residual, weight, eps):
        if x.dim() == 2 and x.is_contiguous() and (residual is None or residual.is_contiguous()):
            return rms_norm(x, residual, weight, eps)  # the model's case: no reshaping
        shape = x.shape
        x2 = x.reshape(-1, shape[-1]).contiguous()
        r2 = None if residual is None else residual.reshape(-1, shape[-1]).contiguous()
        out, res = rms_norm(x2, r2, weight, float(eps))
        return out.view(shape), res.view(shape)

    return kernel


def _rotary_kernel(ops):
    def kernel(qkv, cos, sin, heads, head_dim):
        ops.rotary_inplace(qkv, cos.contiguous(), sin.contiguous(), heads, head_dim)

    return kernel


def attach_fused_ops(model: torch.nn.Module) -> int:
    """Set the fused kernels on the model's norms, MLPs (SiLU only) and attention layers that take one
    (`norm_kernel`, `act_mul_kernel`, `rotary_kernel`); returns how many modules got one."""
    from tgi.backends.cpu import native

    ops = native.fused()
    norm, rotary = _norm_kernel(ops), _rotary_kernel(ops)
    count = 0
    for module in model.modules():
        if isinstance(module, RMSNorm):
            module.norm_kernel = norm
        elif isinstance(module, GatedMLP) and module.hidden_act in ("silu", "swish"):
            module.act_mul_kernel = ops.silu_mul
        elif "rotary_kernel" in dir(type(module)):
            module.rotary_kernel = rotary
        else:
            continue
        count += 1
    return count
