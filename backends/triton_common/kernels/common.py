"""Helpers shared by the kernels: interpreter detection, block-size choices, in-kernel math."""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl


def interpreting() -> bool:
    """True when triton runs kernels in its numpy interpreter (`TRITON_INTERPRET=1`), i.e. on CPU tensors."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0", "false", "False")


def upcast_dot(dtype: torch.dtype) -> bool:
    """Whether `tl.dot` must run on float32 operands.

    float32 inputs: yes, with IEEE precision (the default TF32 would lose ~3 digits). bfloat16 under the
    interpreter: yes, because the interpreter keeps bfloat16 as raw uint16 bits and its `tl.dot` multiplies
    the bit patterns (triton-lang/triton#11584). On a GPU bfloat16/float16 run on the tensor cores.
    """
    return dtype == torch.float32 or (dtype == torch.bfloat16 and interpreting())


def block_d(head_dim: int) -> int:
    """Head dimension padded to a power of two of at least 16 (the smallest `tl.dot` operand)."""
    return max(16, triton.next_power_of_2(head_dim))


@triton.jit
def softcap_fn(s, softcap):
    """softcap * tanh(s / softcap), with tanh from exp (no libdevice: it also runs in the interpreter).
    tanh(x) = 1 - 2 / (exp(2x) + 1) saturates cleanly to +-1 for large |x|."""
    x = s / softcap
    return softcap * (1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0))


@triton.jit
def qk_dot(q, k, UPCAST: tl.constexpr):
    """q [M, D] . k [N, D]^T -> [M, N] float32."""
    if UPCAST:
        s = tl.dot(q.to(tl.float32), tl.trans(k.to(tl.float32)), input_precision="ieee")
    else:
        s = tl.dot(q, tl.trans(k))
    return s


@triton.jit
def pv_dot(p, v, UPCAST: tl.constexpr):
    """p [M, N] float32 . v [N, D] -> [M, D] float32 (p in v's dtype on the tensor cores)."""
    if UPCAST:
        o = tl.dot(p, v.to(tl.float32), input_precision="ieee")
    else:
        o = tl.dot(p.to(v.dtype), v)
    return o
