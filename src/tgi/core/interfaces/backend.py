"""The hardware backend: what every plugin provides, whatever its framework (torch backends derive from
`tgi.core.torch.TorchBackend`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, ClassVar

from tgi.core.interfaces.types import DeviceInfo, MemoryInfo, UnsupportedError

if TYPE_CHECKING:
    from tgi.core.config import EngineConfig
    from tgi.core.interfaces.runner import ModelRunner
    from tgi.core.loading.source import ModelSource
    from tgi.core.plugins.spec import BackendSpec


class Backend(ABC):
    """A hardware backend, created by its `BackendSpec.create` after `probe` said it is available.

    Every backend states its devices, memory and dtypes and creates the model runner. Backends that run
    core's torch models derive from `tgi.core.torch.TorchBackend` instead and get core's runner for free; a
    backend of another framework (JAX, a vendor's compiler) brings its own `ModelRunner`.
    """

    #: the name users select it by (`--backend NAME`); equal to its BackendSpec's name
    name: ClassVar[str]
    #: share of the free memory (`memory_info().free` after loading) the KV cache takes when the user sets no
    #: budget (`--max-batch-total-tokens`); device memory is the server's alone, host memory is shared
    kv_cache_memory_fraction: ClassVar[float] = 0.9
    #: whether its runner captures decode steps as graphs, at the batch sizes `EngineConfig.cuda_graphs`
    #: names (TGI's `--cuda-graphs`); the engine refuses sizes for a backend that cannot
    captures_graphs: ClassVar[bool] = False
    #: the spec this backend was created from, set by the engine after `spec.create()`: a backend that runs
    #: ranks in other processes builds their backends with it (`spec.create` is picklable for entry points)
    spec: BackendSpec | None = None

    @abstractmethod
    def devices(self) -> list[DeviceInfo]:
        """The devices this backend will use (one per rank under tensor parallelism)."""

    @abstractmethod
    def memory_info(self) -> MemoryInfo:
        """Memory of the current device now. Called after the weights load, to size the KV cache."""

    @abstractmethod
    def supported_dtypes(self) -> tuple[str, ...]:
        """Dtype names (see `tgi.core.interfaces.types.DTYPES`) this backend computes in."""

    @abstractmethod
    def default_dtype(self) -> str:
        """The dtype used when the user does not ask for one."""

    def default_dtype_reason(self) -> str:
        """Why `default_dtype()` is the default on this machine, for the start-up line ("" if obvious)."""
        return ""

    def describe_kernels(self, dtype: str) -> dict[str, str]:
        """Kernel -> the implementation it runs with on this machine for a model in `dtype` (e.g. "decode
        attention": "cpu-native AVX-512"), as chosen at start-up; shown at start, by `tgi backends` and in
        `/info`. Empty when the backend has nothing to say."""
        return {}

    def serve_beside_event_loop(self) -> None:
        """Called once when the engine starts stepping beside a server in this process (`AsyncEngine`), whose
        event loop and clients want CPU time while a step runs: a backend computing on the host may leave
        them some. Offline use (`LLMEngine.generate`) never calls it. Default: nothing."""
        return

    def release_loading_thread(self) -> None:
        """Called by the thread that loaded and warmed up a model for a server (`AsyncEngine.from_config`, at
        start-up or for a model swap), once that is done: from then on another thread, the engine's own, steps
        it. A backend whose kernels keep workers per calling thread may free this thread's here. Default:
        nothing."""
        return

    def release_memory(self) -> None:
        """Hand the memory that freed tensors left cached (a caching allocator's pool, the C heap's free
        pages) back to the device or the OS. Called after a runner's `shutdown()` (a model swapped out), so
        that the memory is free for the next model and shows as free in `memory_info()`. Default: nothing."""
        return

    def bind_rank(self, local_rank: int) -> None:
        """Take the device of rank `local_rank` among this host's ranks of a tensor-parallel group. Called
        in each rank's process (rank 0's too) right after `spec.create()`, before the group's collective,
        the runner or any tensor is made; never called without tensor parallelism. A backend with one
        device per rank makes device `local_rank` (of those visible to the process) its own and the
        process's current one, so that the ranks do not all land on the first device; it raises
        `ConfigError` naming how many devices it sees when there is no such device. Default: nothing
        (ranks that share the host's memory)."""
        return

    @abstractmethod
    def create_runner(self, source: ModelSource, config: EngineConfig, world_size: int = 1) -> ModelRunner:
        """A runner for `source` over `world_size` devices (`--num-shard`), not yet loaded.

        How the devices share the model is the backend's to decide: torch backends run one process per
        rank with tensor-parallel layers (`tgi.core.torch.TorchBackend`), a JAX backend may run one process
        over a device mesh, a compiler may place the model on its cores itself. Whatever it does, the
        engine sees one `ModelRunner`. Raise `ConfigError` or `UnsupportedError`, with the reason, when the
        model cannot be split over `world_size` devices here."""

    def weight_formats(self, dtype: str) -> dict[str, str]:
        """Quantized weight formats (`tgi.core.interfaces.quantization.WEIGHT_FORMATS` names, and GGUF's
        "gguf-<type>") this backend computes linear layers with for a model whose activations are in `dtype`:
        format -> the kernel that computes it (e.g. "gptq-int4": "aten int4 pack-mm (CPU)"). The runner
        refuses a model in another format with `UnsupportedError` naming these; none are ever dequantized to
        dense weights behind the user's back. Default: none."""
        return {}

    def check_weight_format(self, weight_format: str, dtype: str) -> None:
        """Raise `UnsupportedError` if this backend has no kernel for `weight_format` in `dtype`, naming the
        formats it computes."""
        formats = self.weight_formats(dtype)
        if weight_format not in formats:
            supported = ", ".join(sorted(formats)) or "none"
            raise UnsupportedError(
                f"backend '{self.name}' has no kernel for {weight_format} weights with {dtype} activations "
                f"(it computes: {supported})"
            )

    def select_attention(self, name: str) -> None:
        """Use the attention implementation `name` (`--attention`); raise `UnsupportedError` when it
        cannot be used. Backends without a choice refuse every name."""
        raise UnsupportedError(f"backend '{self.name}' offers no choice of attention implementation")

    def attention_in_use(self) -> str:
        """The name of the attention implementation this backend computes with now (after `select_attention`
        and `use_batch_invariant_kernels`), for the start-up line. Default: "the backend's own", for a
        backend that offers no choice."""
        return "the backend's own"

    def use_batch_invariant_kernels(self, dtype: str) -> None:
        """Switch to kernels whose result for each row (a sequence's token) is computed in a fixed order that
        does not depend on the other rows of the step, their number, the row's place among them, how a
        prompt is chunked, what came from the prefix cache, or the thread count (`--deterministic`). Called
        by the engine before the runner is created; the runner then reports
        `RunnerCapabilities.batch_invariant`. Raise `UnsupportedError` saying why when this backend cannot
        (the default: it has no such kernels)."""
        raise UnsupportedError(f"backend '{self.name}' has no batch-invariant kernels")

    def kv_cache_dtypes(self, dtype: str) -> tuple[str, ...]:
        """What this backend's KV cache can store, and its attention read, for a model computing in `dtype`
        (`tgi.core.interfaces.types.KV_CACHE_DTYPES` names, "auto" first: the model's dtype). The engine
        refuses any other `--kv-cache-dtype` at start, naming these; a torch backend that lists a quantized
        one gets `KVCacheSpec.kv_dtype` set to it in `create_kv_cache`. Default: "auto" only."""
        return ("auto",)

    def check_kv_cache_dtype(self, kv_dtype: str, dtype: str) -> None:
        """Raise `UnsupportedError` if the KV cache cannot store `kv_dtype` for a model in `dtype`, naming what
        it stores (a backend may say more: which of its settings stands in the way)."""
        stored = self.kv_cache_dtypes(dtype)
        if kv_dtype not in stored:
            raise UnsupportedError(
                f"backend '{self.name}' does not store the KV cache as {kv_dtype} "
                f"(it stores: {', '.join(stored)}; auto is the model's dtype)"
            )

    def check_dtype(self, dtype: str) -> None:
        """Raise `UnsupportedError` if `dtype` cannot be used (never fall back silently)."""
        if dtype not in self.supported_dtypes():
            raise UnsupportedError(
                f"backend '{self.name}' does not support dtype {dtype} (supported: {', '.join(self.supported_dtypes())})"
            )
