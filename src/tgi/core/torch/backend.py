"""`TorchBackend`: a backend that runs core's torch model definitions on its own kernels."""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, ClassVar

from tgi.core.interfaces.backend import Backend
from tgi.core.interfaces.collective import Collective, SingleProcessCollective
from tgi.core.interfaces.types import KVCacheSpec, UnsupportedError

if TYPE_CHECKING:
    import torch

    from tgi.core.config import EngineConfig
    from tgi.core.interfaces.runner import ModelRunner
    from tgi.core.loading.source import ModelSource
    from tgi.core.lora.ops import LoRAOps
    from tgi.core.quant.kernels import QuantizedLinearKernel
    from tgi.core.quant.weights import QuantizedWeight
    from tgi.core.torch.attention import AttentionBackend
    from tgi.core.torch.kv_cache import KVCache
    from tgi.core.torch.sampler import Sampler


class TorchBackend(Backend):
    """A backend that runs core's torch model definitions (CPU, CUDA, ROCm, XPU, Gaudi).

    It provides a device, attention kernels, KV storage and a sampler; core's `TorchModelRunner` does the
    rest (loading, batching tensors, the forward pass).
    """

    #: `torch.distributed` process-group backend for tensor parallelism (gloo, nccl, hccl, xccl)
    process_group_backend: ClassVar[str] = "gloo"
    #: tokens of the warm-up's prefill step; None: the whole step budget (`--max-batch-prefill-tokens`), so
    #: that the largest step's memory peak is met at start-up, not by a request. A backend whose memory is
    #: not profiled that way (host memory: the KV cache is a share of it) may warm its kernels on less
    warmup_prefill_tokens: ClassVar[int | None] = None
    #: sequences of the warm-up's decode step; None: `--max-num-seqs` (the largest decode's memory peak met
    #: at start-up); a backend whose memory is not profiled that way may warm its kernels on fewer
    warmup_decode_seqs: ClassVar[int | None] = None

    @abstractmethod
    def torch_device(self) -> torch.device:
        """The device model weights and the KV cache live on."""

    #: the attention implementation in use (`--attention`); a backend sets its default in `__init__`
    attention_name: str
    _attention: AttentionBackend | None = None  # made once, by `attention()` or `select_attention`
    #: set by `use_batch_invariant_kernels` once the backend serves with batch-invariant kernels only; the
    #: torch runner reports it as `RunnerCapabilities.batch_invariant`
    batch_invariant: bool = False
    #: the device runs queued work while the host goes on (CUDA, ROCm, XPU streams): the torch runner then
    #: starts steps without waiting for them (`RunnerCapabilities.async_steps`, `--async-scheduling`); on the
    #: CPU the kernels run as they are called, so there is nothing to overlap
    overlaps_steps: ClassVar[bool] = False

    @abstractmethod
    def create_attention(self, name: str) -> AttentionBackend:
        """A new instance of the attention implementation `name` (one of `attention_names()`); raise
        `UnsupportedError` with the reason when it cannot run here."""

    def attention_names(self) -> tuple[str, ...]:
        """The attention implementations `select_attention` accepts (`--attention NAME`)."""
        return (self.attention_name,)

    def attention(self) -> AttentionBackend:
        """The attention kernels: `attention_name`'s, made on first use and kept."""
        if self._attention is None:
            self._attention = self.create_attention(self.attention_name)
        return self._attention

    def attention_in_use(self) -> str:
        return self.attention().name

    def select_attention(self, name: str) -> None:
        """Use the attention implementation `name` from now on; raise `UnsupportedError` with the reason
        when it is unknown or cannot run here (never substitute another)."""
        if name not in self.attention_names():
            raise UnsupportedError(
                f"backend '{self.name}' has no attention '{name}' (available: {', '.join(self.attention_names())})"
            )
        self._attention = self.create_attention(name)
        self.attention_name = name

    @abstractmethod
    def create_kv_cache(self, spec: KVCacheSpec, num_blocks: int) -> KVCache:
        """Allocate the paged KV cache on the device."""

    def sampler(self) -> Sampler:
        """The sampler; core's vectorised torch reference by default."""
        from tgi.core.sampling.sampler import TorchSampler

        return TorchSampler()

    def create_collective(self, rank: int, world_size: int, init_method: str | None = None) -> Collective:
        """`torch.distributed` with this backend's `process_group_backend`, on its device."""
        if world_size == 1:
            return SingleProcessCollective()
        from tgi.core.parallel.collective import TorchDistributedCollective

        return TorchDistributedCollective(
            self.process_group_backend, rank, world_size, init_method, device=self.torch_device()
        )

    def block_weight_types(self, dtype: str) -> frozenset[str]:
        """GGUF block formats ("Q4_0", "Q4_1", "Q8_0", ...) this backend computes with directly for a model
        in `dtype`. For a GGUF checkpoint, the runner attaches such weights to their linears as
        `module.quant_weight` (a `tgi.core.loading.block_weights.BlockWeight`, format "gguf-<type>") beside
        the dense weights, and asks `quantized_linear` for their kernels; none are read for an empty set.
        Default: none."""
        return frozenset()

    def standalone_block_types(self, dtype: str) -> frozenset[str]:
        """The block formats of `block_weight_types(dtype)` whose kernel (`quantized_linear`) takes every
        row count (`max_rows` None): a linear stored wholly in them is loaded without its dense copy
        (`tgi.core.torch.dense_free_loading`), and a kernel that then takes fewer rows fails the load.
        Default: none (every dense weight is dequantized and kept until the kernels are attached)."""
        return frozenset()

    def gguf_dequantizer(self, dtype: str):
        """A dequantizer of a GGUF file's stored tensors for a model in `dtype`
        (`tgi.core.loading.gguf_loader.GGUFDequantizer`: the file's bytes of one tensor -> its dense torch
        weight, the values `gguf` gives, or None for a type it does not take), used in place of `gguf`'s
        numpy dequantization when loading; None (the default): `gguf`'s for every tensor."""
        return None

    def quantized_linear(self, weight: QuantizedWeight, dtype: str) -> QuantizedLinearKernel:
        """The kernel for one linear layer's quantized `weight` (its format is one of
        `weight_formats(dtype)`) with activations in `dtype`: the seam of `tgi.core.quant.kernels`, whose
        docstring states the contract (what it computes, `max_rows`, keeping the weight packed). Raise
        `UnsupportedError` with the reason for a weight it cannot compute (a group size, a shape).
        Default: every format refused."""
        from tgi.core.interfaces.types import UnsupportedError

        raise UnsupportedError(f"backend '{self.name}' computes no quantized weights ({weight.format})")

    def prepare_model(self, model: torch.nn.Module) -> None:
        """Called once after the weights are loaded, before warm-up: the backend may attach faster kernels
        to the model's linear layers (set `module.linear_kernel = fn(x, bias)` on modules that declare a
        `linear_kernel` attribute, see `tgi.core.models.layers.linear`), e.g. with prepacked weights. Such a
        kernel must compute the same `x @ weight.T + bias`: it may not change the model's results beyond
        the dtype's rounding. Linears with a quantized weight (`module.quant_weight`) get their kernel from
        `quantized_linear` afterwards (a kernel set here on them serves as the dense product for the row
        counts the quantized kernel leaves); leave alone those whose `weight` is a meta tensor (no dense
        copy)."""

    def lora_ops(self) -> LoRAOps:
        """The batched low-rank products of LoRA adapters (`--lora-adapters`, see `tgi.core.lora.ops`):
        core's torch reference (a gather, two matmuls and a scatter per adapter in the step) unless the
        backend brings a fused kernel."""
        from tgi.core.lora.ops import TorchLoRAOps

        return TorchLoRAOps()

    def begin_step(self, num_tokens: int) -> None:
        """Called by the torch runner before each step with the step's token count: a backend may size
        per-step resources here (the CPU backend: its intra-op threads). Default: nothing."""

    def synchronize(self) -> None:
        """Wait for queued device work (for timing and warm-up)."""

    def create_runner(self, source: ModelSource, config: EngineConfig, world_size: int = 1) -> ModelRunner:
        """One rank's runner for a single device; over `world_size > 1` devices, tensor parallelism by
        processes: this process is rank 0 of a `TensorParallelRunner` that starts ranks 1..N-1, each
        building this backend again from `self.spec` and its rank's runner (`create_rank_runner`)."""
        if world_size == 1:
            return self.create_rank_runner(source, config, SingleProcessCollective())
        from tgi.core.parallel.runner import TensorParallelRunner

        return TensorParallelRunner.start(self, source, config, world_size)

    def create_rank_runner(
        self, source: ModelSource, config: EngineConfig, collective: Collective
    ) -> ModelRunner:
        """The runner of one rank of `collective`'s group (the whole model when it is a group of one):
        core's `TorchModelRunner` unless the backend brings its own."""
        if config.pipeline_parallel_size > 1:  # this rank's stage of the layers
            from tgi.core.parallel.pipeline_runner import PipelineStageRunner

            return PipelineStageRunner(self, source, config, collective)
        from tgi.core.torch.runner import TorchModelRunner

        return TorchModelRunner(self, source, config, collective)
