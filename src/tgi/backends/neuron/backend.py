"""`NeuronBackend`: AWS Inferentia2/Trainium through models compiled for a static batch of slots."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from tgi.core.interfaces import Backend, DeviceInfo, MemoryInfo

if TYPE_CHECKING:
    from tgi.backends.neuron.device import NeuronDevice
    from tgi.core.config import EngineConfig
    from tgi.core.interfaces import ModelRunner
    from tgi.core.loading.source import ModelSource


class NeuronBackend(Backend):
    """A backend of its own framework (a vendor's compiler): it brings its own runner
    (`NeuronModelRunner`), and `--num-shard N` is the number of NeuronCores the compiler shards the model
    over (tensor parallelism as the compiler arranges it, in one process).

    :param device: the `NeuronDevice` (default: `OptimumNeuronDevice`, over optimum-neuron)
    """

    name: ClassVar[str] = "neuron"
    #: the runner reports exactly the compiled model's slots as free memory: all of it is the KV cache
    kv_cache_memory_fraction: ClassVar[float] = 1.0

    def __init__(self, device: NeuronDevice | None = None) -> None:
        if device is None:
            from tgi.backends.neuron.device import OptimumNeuronDevice

            device = OptimumNeuronDevice()
        self.device = device

    def devices(self) -> list[DeviceInfo]:
        return [DeviceInfo(0, self.device.device_name(), 0)]

    def memory_info(self) -> MemoryInfo:
        """Unknown before a model is compiled (its runner reports the compiled slots instead)."""
        return MemoryInfo(total=0, free=0)

    def supported_dtypes(self) -> tuple[str, ...]:
        return ("bfloat16", "float16", "float32")

    def default_dtype(self) -> str:
        return "bfloat16"

    def describe_kernels(self, dtype: str) -> dict[str, str]:
        return {"model": "compiled by optimum-neuron for a static batch of slots; sampling on the host"}

    def create_runner(self, source: ModelSource, config: EngineConfig, world_size: int = 1) -> ModelRunner:
        from tgi.backends.neuron.runner import NeuronModelRunner

        return NeuronModelRunner(self.device, source, config, num_cores=world_size)
