"""What `--deterministic` puts into a model on the Triton backends (CUDA, ROCm, XPU), or refuses by name.

Contract of `attach_invariant_kernels(model)`: afterwards every reduction of the model's forward pass whose
order could follow the batch (the row count, where a row sits, how a prompt was chunked) runs in a Triton
kernel whose order per row is fixed: every linear with a dense weight (the LM head included) through
`kernels.invariant_matmul` (one tile shape, no split of K), every `RMSNorm` through `kernels.rms_norm` (one
program per row). Quantized linears get theirs from the backend's `quantized_linear` afterwards (one split
along K); attention and the sampler are the backend's (`TritonAttention(batch_invariant=True)`, the per-row
`TorchSampler`). What remains is elementwise (rotary, SiLU, residual adds) or exact (embedding lookups, KV
writes). A model holding a layer none of these covers is refused with `UnsupportedError` naming it: other
norms (torch's reductions choose their threads by shape), mixture-of-experts layers (the routing's and the
experts' sums are not checked), linears that take no backend kernel (the transformers fallback's).
"""

from __future__ import annotations

import torch

from tgi.core.interfaces import UnsupportedError


def attach_invariant_kernels(model: torch.nn.Module) -> dict[str, int]:
    """Attach the batch-invariant kernels (see the module docstring); returns kernel -> number of modules.
    Raises `UnsupportedError` naming the first layer no kernel covers, before changing anything."""
    from tgi.backends.triton_common.kernels.invariant_matmul import InvariantLinear
    from tgi.backends.triton_common.kernels.rms_norm import rms_norm
    from tgi.core.models.layers import RMSNorm
    from tgi.core.models.moe import GroupedExperts

    linears, norms = [], []
    for name, module in model.named_modules():
        kind = type(module).__name__
        if isinstance(module, GroupedExperts):
            raise UnsupportedError(
                f"{name} is a mixture-of-experts layer: the Triton backends' fused MoE kernel and its routing "
                "are not batch-invariant (--deterministic serves dense models)"
            )
        if isinstance(module, RMSNorm):
            norms.append(module)
        elif "Norm" in kind:
            raise UnsupportedError(
                f"{name} is a {kind}: the Triton backends have a batch-invariant kernel for RMSNorm only"
            )
        elif "linear_kernel" in dir(type(module)):
            if not module.weight.is_meta:  # quantized: the seam attaches theirs
                linears.append(module)
        elif isinstance(module, torch.nn.Linear):
            raise UnsupportedError(
                f"{name} is a {kind} that takes no backend kernel: its torch product is not batch-invariant"
            )
    for module in linears:
        module.linear_kernel = InvariantLinear(module.weight)
    for module in norms:
        module.norm_kernel = rms_norm
    return {"triton invariant matmul": len(linears), "triton rms norm": len(norms)}
