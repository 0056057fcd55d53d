"""The model runner: loads a model onto a backend and executes scheduled batches."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from tgi.core.interfaces.batch import ScheduledBatch, StepOutput
from tgi.core.interfaces.pooling import PoolingSpec
from tgi.core.interfaces.quantization import QuantizationInfo
from tgi.core.interfaces.types import KVCacheSpec, MemoryInfo, RunnerCapabilities, RunnerConstraints


class StepHandle(ABC):
    """A step a runner has started (`ModelRunner.execute_async`) and the host has not read yet."""

    @abstractmethod
    def result(self) -> StepOutput:
        """Wait for the step and return what `execute` would have returned for it. Called once, in the order
        the steps were started."""


class DoneStep(StepHandle):
    """A step that ran to the end before its handle was made (a runner with nothing to overlap)."""

    def __init__(self, output: StepOutput) -> None:
        self._output = output

    def result(self) -> StepOutput:
        return self._output


@dataclass(frozen=True)
class ModelInfo:
    """What the engine and server need to know of a loaded model."""

    architecture: str  # e.g. "LlamaForCausalLM"
    vocab_size: int
    max_position_embeddings: int  # context length
    eos_token_ids: tuple[int, ...]
    dtype: str
    num_parameters: int
    lora_adapters: tuple[str, ...] = ()  # ids of the LoRA adapters loaded with it (`--lora-adapters`)
    # the quantized weights it computes with (`--quantize` or the checkpoint's); None: dense weights only
    quantization: QuantizationInfo | None = None
    # a pooling model (embeddings): how its vectors are made; None: a generative model
    pooling: PoolingSpec | None = None


class ModelRunner(ABC):
    """Runs one model on one backend (one rank of it, under tensor parallelism).

    Lifecycle, driven by the engine: `load()` -> `kv_cache_spec()` -> the engine sizes the cache from the
    backend's free memory or `--max-batch-total-tokens` -> `initialize_cache(num_blocks)` -> `warmup()` ->
    `execute(batch)` once per step -> `shutdown()`.

    Torch backends get core's `TorchModelRunner`, which runs core's model definitions on the backend's
    attention, KV cache and sampler. Backends that compile whole models (static shapes) bring their own and
    declare their `constraints()`, which the scheduler honours.
    """

    @abstractmethod
    def load(self) -> ModelInfo:
        """Load weights onto the device; return what the engine must know of the model."""

    @abstractmethod
    def kv_cache_spec(self) -> KVCacheSpec:
        """Shape of the KV cache this model needs (per rank)."""

    @abstractmethod
    def initialize_cache(self, num_blocks: int) -> None:
        """Allocate the KV cache with `num_blocks` blocks."""

    def warmup(self, max_batch_tokens: int, max_num_seqs: int) -> None:  # noqa: B027 - optional
        """Run the largest step the scheduler may build, so that compilation, graph capture and peak memory
        happen before serving; raise with the reason if it does not fit."""

    def memory_info(self) -> MemoryInfo | None:
        """Memory to size the KV cache from, after `load()`, when the runner knows it better than its
        backend's `memory_info()` does (several devices or processes: the one with the least free).
        None (the default): the backend's."""
        return None

    def constraints(self) -> RunnerConstraints:
        """Shape constraints the scheduler must honour (default: none)."""
        return RunnerConstraints()

    def capabilities(self) -> RunnerCapabilities:
        """What this runner can do beyond the plain contract (default: nothing more)."""
        return RunnerCapabilities()

    @abstractmethod
    def execute(self, batch: ScheduledBatch) -> StepOutput:
        """Run one step: write the batch's keys/values, compute logits, sample the sequences with
        `sample=True` (applying `batch.token_masks` when `capabilities().token_masks`). Must not keep
        references to `batch` past the call, except per-request state it
        drops when the request id appears in a later batch's `freed_request_ids`."""

    def execute_async(self, batch: ScheduledBatch) -> StepHandle:
        """Start one step and return before the device has run it (only where `capabilities().async_steps`):
        the engine settles the step before on the host meanwhile and reads this one with `result()`. Steps
        run in the order they are started. A decode whose token is `PENDING_TOKEN` is fed the token this
        runner sampled for that request in the step started just before (taken on the device, never copied
        back first). `execute(batch)` must equal `execute_async(batch).result()`. Default: `execute` now."""
        return DoneStep(self.execute(batch))

    def load_lora_adapter(self, name: str, path: str) -> tuple[str, ...]:
        """Serve the PEFT adapter in folder `path` as `name` from the next step on (called between steps, by
        the thread that calls `execute`); returns the ids of the adapters loaded now. An adapter that does
        not fit raises `tgi.core.config.ConfigError` with the reason, leaving the loaded ones as they were.
        Only runners whose `capabilities().lora_runtime_loading` is set implement it."""
        raise NotImplementedError(f"{type(self).__name__} does not load LoRA adapters at run time")

    def unload_lora_adapter(self, name: str) -> tuple[str, ...]:
        """Drop adapter `name` (between steps, when no request of it is in flight); returns the ids left."""
        raise NotImplementedError(f"{type(self).__name__} does not unload LoRA adapters at run time")

    def shutdown(self) -> None:  # noqa: B027 - optional
        """Release device memory and worker processes."""
