"""SiLU(gate) * up in one launch (`GatedMLP.act_mul_kernel`).

The MLP's torch path splits the fused gate/up projection, runs SiLU on the gate and multiplies (two
launches and an intermediate the size of the product); here one program reads a tile of the gate and of
the up half of a row and writes the product. Arithmetic in float32, rounded once to the input's dtype.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

#: columns of one program's tile
BLOCK = 1024


@triton.jit
def _silu_mul_kernel(x_ptr, out_ptr, INTER, stride_x, stride_o, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    ok = cols < INTER
    gate = tl.load(x_ptr + row * stride_x + cols, mask=ok, other=0.0).to(tl.float32)
    up = tl.load(x_ptr + row * stride_x + INTER + cols, mask=ok, other=0.0).to(tl.float32)
    act = gate / (1.0 + tl.exp(-gate))
    tl.store(out_ptr + row * stride_o + cols, (act * up).to(out_ptr.dtype.element_ty), mask=ok)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """`GatedMLP.act_mul_kernel`: `gate_up` [..., 2 * I] -> silu(gate) * up [..., I], in its dtype."""
    width = gate_up.shape[-1]
    if width % 2:
        raise ValueError(f"gate_up's last dimension {width} is not two halves")
    inter = width // 2
    lead = gate_up.shape[:-1]
    x = gate_up.reshape(-1, width)
    if x.stride(-1) != 1:
        x = x.contiguous()
    rows = x.shape[0]
    out = torch.empty(rows, inter, dtype=gate_up.dtype, device=gate_up.device)
    if rows and inter:
        block = min(BLOCK, triton.next_power_of_2(inter))
        _silu_mul_kernel[(rows, triton.cdiv(inter, block))](
            x, out, inter, x.stride(0), out.stride(0), BLOCK=block
        )
    return out.reshape(*lead, inter)
