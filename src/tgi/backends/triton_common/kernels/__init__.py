"""Triton kernels for paged attention: the KV write at a slot mapping, split-K decode, ragged prefill.

Every kernel runs on CUDA and ROCm GPUs, and on CPU tensors under `TRITON_INTERPRET=1` (how CI tests them).
The wrappers take torch tensors and launch; they import triton lazily so that importing this package is
cheap and works where triton is missing (the error then names the package to install).
"""

from tgi.backends.triton_common.kernels.decode import paged_decode_attention
from tgi.backends.triton_common.kernels.prefill import paged_prefill_attention
from tgi.backends.triton_common.kernels.reshape_and_cache import reshape_and_cache

__all__ = ["paged_decode_attention", "paged_prefill_attention", "reshape_and_cache"]
