"""`TritonBackend`: what the CUDA, ROCm and XPU backends share.

CUDA and ROCm reach their GPU through `torch.cuda`, XPU through `torch.xpu`, which mirrors it (memory,
synchronisation, graphs); `device_type` names the torch module. A concrete backend derives from it and sets
its `name`, `device_type`, `process_group_backend`, and whatever differs on its hardware (the ROCm backend
names the GPU's architecture in `devices()`)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, ClassVar

import torch

from tgi.core.interfaces import Collective, DeviceInfo, KVCacheSpec, MemoryInfo
from tgi.core.torch import AttentionBackend, KVCache, TorchBackend

if TYPE_CHECKING:
    from tgi.core.config import EngineConfig
    from tgi.core.interfaces import ModelRunner
    from tgi.core.loading.source import ModelSource
    from tgi.core.quant.kernels import QuantizedLinearKernel
    from tgi.core.quant.weights import QuantizedWeight

#: attention implementation by name (`triton`, `flash-attn`, `flashinfer`); see `attention.py`
ENV_ATTENTION = "TGI_ATTENTION"
#: 1: capture CUDA graphs for decode steps (untested on hardware, off by default; see graphs.py)
ENV_CUDA_GRAPHS = "TGI_CUDA_GRAPHS"
#: bytes kept free beyond the measured activation peak (allocator fragmentation, NCCL buffers, graphs)
DEFAULT_MEMORY_MARGIN = 512 * 1024 * 1024


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


class TritonBackend(TorchBackend):
    """One GPU per rank (`torch.cuda`: CUDA or ROCm's HIP build; `torch.xpu`: Intel), Triton attention,
    the backend's collectives (nccl, xccl).

    :param device_index: the GPU of this process (default: the current device); under tensor parallelism
        each rank takes its own with `bind_rank(local_rank)` before anything is made on it
    :param attention: attention implementation name (default: `$TGI_ATTENTION`, else `triton`)
    :param cuda_graphs: capture decode steps as CUDA graphs (default: `$TGI_CUDA_GRAPHS`, else off)

    KV-cache sizing: `memory_info()` is called after the weights load; the runner has by then run one
    profiling step of the largest prefill and decode the scheduler may build (on a temporary cache) and
    recorded its activation peak with `reserve_activation_memory`. `free` is what the device has left minus
    that peak and a margin, so the engine's `free * kv_cache_memory_fraction` goes to the KV cache.
    """

    process_group_backend: ClassVar[str] = "nccl"  # RCCL under the same name on ROCm
    captures_graphs: ClassVar[bool] = True  # decode steps, at --cuda-graphs sizes (`graphs.py`)
    overlaps_steps: ClassVar[bool] = True  # kernels queue on the device's stream: steps overlap the host
    #: the torch device type, and the name of the torch module that drives it (`torch.cuda`, `torch.xpu`)
    device_type: ClassVar[str] = "cuda"
    #: the graph class of that module (`torch.cuda.CUDAGraph`, `torch.xpu.XPUGraph`)
    graph_class: ClassVar[str] = "CUDAGraph"

    def __init__(
        self,
        device_index: int | None = None,
        attention: str | None = None,
        cuda_graphs: bool | None = None,
    ) -> None:
        #: every device call goes through this module (`torch.cuda` or `torch.xpu`); tests replace it
        self.device_module = getattr(torch, self.device_type)
        if device_index is None:
            dm = self.device_module
            device_index = dm.current_device() if dm.is_available() else 0
        self.device = torch.device(self.device_type, device_index)
        self.attention_name = attention or os.environ.get(ENV_ATTENTION) or "triton"
        self.cuda_graphs = _env_flag(ENV_CUDA_GRAPHS) if cuda_graphs is None else cuda_graphs
        self.memory_margin = DEFAULT_MEMORY_MARGIN
        self._activation_bytes = 0

    # -- device and memory ------------------------------------------------------------------------------
    def torch_device(self) -> torch.device:
        return self.device

    def devices(self) -> list[DeviceInfo]:
        props = self.device_module.get_device_properties(self.device)
        return [DeviceInfo(self.device.index or 0, props.name, props.total_memory)]

    def bind_rank(self, local_rank: int) -> None:
        """Rank `local_rank` of this host computes on GPU `local_rank` (numbered among the visible ones):
        it becomes this backend's device and the process's current device, which Triton launches, NCCL's
        `device_id` and graph captures use. Raises `ConfigError` when fewer GPUs are visible."""
        from tgi.core.config import ConfigError

        dm = self.device_module
        count = dm.device_count() if dm.is_available() else 0
        if not 0 <= local_rank < count:
            raise ConfigError(
                f"tensor-parallel rank {local_rank} needs {self.device_type}:{local_rank}, but this process "
                f"sees {count} {self.device_type} device(s): use --num-shard {max(count, 1)} or fewer, or make "
                f"more devices visible"
            )
        dm.set_device(local_rank)
        self.device = torch.device(self.device_type, local_rank)

    def reserve_activation_memory(self, nbytes: int) -> None:
        """Called by the runner with the measured peak of a forward step beyond the weights."""
        self._activation_bytes = max(0, int(nbytes))

    def memory_info(self) -> MemoryInfo:
        dm = self.device_module
        free, total = dm.mem_get_info(self.device)
        # memory torch's caching allocator holds but does not use is free for the KV cache too
        cached = dm.memory_reserved(self.device) - dm.memory_allocated(self.device)
        usable = free + cached - self._activation_bytes - self.memory_margin
        return MemoryInfo(total=total, free=max(0, usable))

    def synchronize(self) -> None:
        self.device_module.synchronize(self.device)

    def release_memory(self) -> None:
        # the caching allocator keeps freed blocks for reuse: hand them back to the device
        self.device_module.empty_cache()

    def supported_dtypes(self) -> tuple[str, ...]:
        return ("bfloat16", "float16", "float32")

    def default_dtype(self) -> str:
        return "bfloat16" if self.device_module.is_bf16_supported() else "float16"

    # -- kernels and storage ----------------------------------------------------------------------------
    def attention_names(self) -> tuple[str, ...]:
        from tgi.backends.triton_common.attention import ATTENTION_IMPLS

        return tuple(ATTENTION_IMPLS)

    def create_attention(self, name: str) -> AttentionBackend:
        from tgi.backends.triton_common.attention import create_attention

        if self.batch_invariant:
            return create_attention(name, batch_invariant=True)
        return create_attention(name)  # raises naming what is missing

    def use_batch_invariant_kernels(self, dtype: str) -> None:
        """`--deterministic`, in bfloat16, float16 and float32: dense linears and the LM head through one
        fixed-tile Triton GEMM with no split of K, RMSNorm one program per row, quantized GEMMs in one split
        along K, decode attention in one split and prefill attention as one decode row per query token
        (a position prefilled or decoded sums its keys in the same order), the sampler row by row (see
        `invariance.py`). LoRA's Triton kernels already run one program per token. Refused: attention
        implementations other than `triton`, and (when the model loads) layers none of these kernels cover
        (mixture-of-experts, norms other than RMSNorm). Verified in Triton's interpreter only: no GPU has
        run this mode yet."""
        from tgi.core.interfaces import UnsupportedError

        self.check_dtype(dtype)
        if self.attention_name != "triton":
            raise UnsupportedError(
                f"the {self.name} backend's batch-invariant attention is its Triton kernels' "
                f"(attention '{self.attention_name}' is not): use --attention triton"
            )
        self.batch_invariant = True
        self._attention = None  # made again, in its batch-invariant mode

    def sampler(self):
        from tgi.core.sampling.sampler import TorchSampler

        return TorchSampler(per_row=self.batch_invariant)  # --deterministic: each row sampled alone

    def prepare_model(self, model: torch.nn.Module) -> None:
        """Mixture-of-experts layers with SiLU experts compute through the fused Triton kernel
        (`kernels.fused_moe`); RMS norms (with their residual add), SiLU-gated MLPs and rotary embeddings
        through the fused elementwise kernels (`fused.attach_fused_kernels`); the linears keep the model's
        own products. `--deterministic`: the batch-invariant kernels instead
        (`invariance.attach_invariant_kernels`, which refuses what they do not cover)."""
        from tgi.core.models.moe import GroupedExperts

        if self.batch_invariant:
            from tgi.backends.triton_common.invariance import attach_invariant_kernels

            attach_invariant_kernels(model)
            return

        from tgi.backends.triton_common.fused import attach_fused_kernels

        attach_fused_kernels(model)
        for module in model.modules():
            if isinstance(module, GroupedExperts) and module.hidden_act in ("silu", "swish"):
                from tgi.backends.triton_common.kernels.fused_moe import fused_moe

                module.experts_kernel = fused_moe

    def lora_ops(self):
        """LoRA deltas through the Triton gather kernels (`kernels.lora`): one launch pair per linear, any
        mix of adapters in the batch."""
        from tgi.backends.triton_common.kernels.lora import TritonLoRAOps

        return TritonLoRAOps()

    def weight_formats(self, dtype: str) -> dict[str, str]:
        """GPTQ (4/8-bit), AWQ (4-bit), FP8 and int8 weights, through the Triton GEMMs of `quant.py`; the
        others (bitsandbytes, GGUF blocks) are refused by name."""
        from tgi.backends.triton_common.quant import weight_formats

        return weight_formats(dtype)

    def quantized_linear(self, weight: QuantizedWeight, dtype: str) -> QuantizedLinearKernel:
        """A Triton GEMM over the packed weight (`quant.TritonQuantizedLinear`), for every row count; in one
        split along K with `--deterministic` (the split otherwise follows the row count)."""
        from tgi.backends.triton_common.quant import quantized_linear

        return quantized_linear(weight, dtype, split=1 if self.batch_invariant else None)

    def kv_cache_dtypes(self, dtype: str) -> tuple[str, ...]:
        """The Triton kernels read a quantized cache's codes and scales (`kernels.kv_quant`): int8 and the
        float8 formats as bytes, widened by integer operations (verified in Triton's interpreter only: no GPU
        has run them yet)."""
        return ("auto", "fp8_e4m3fn", "fp8_e5m2", "int8")

    def create_kv_cache(self, spec: KVCacheSpec, num_blocks: int) -> KVCache:
        from tgi.backends.triton_common.kv_cache import TritonKVCache

        return TritonKVCache(spec, num_blocks, self.torch_device())

    def create_rank_runner(
        self, source: ModelSource, config: EngineConfig, collective: Collective
    ) -> ModelRunner:
        from tgi.backends.triton_common.runner import TritonModelRunner

        graphs = self.cuda_graphs if config.cuda_graphs is None else bool(config.cuda_graphs)
        return TritonModelRunner(self, source, config, collective, cuda_graphs=graphs)
