"""The CPU backend: the reference every test runs, and a fast path for AVX-512/AMX machines."""

from __future__ import annotations

import logging
import os

import torch

from tgi.backends.cpu.cpuinfo import cpu_info
from tgi.core.interfaces import Collective, DeviceInfo, KVCacheSpec, MemoryInfo
from tgi.core.torch import AttentionBackend, KVCache, Sampler, TorchBackend

#: "cpu-native": decode on the C++ paged kernel (compiled at first use; needs g++ and ninja);
#: "cpu-sdpa": the pure-torch reference (index_select gather + masked SDPA). Prefill is the same in both.
ATTENTION_NAMES = ("cpu-native", "cpu-sdpa")

log = logging.getLogger(__name__)


def default_attention() -> str:
    """cpu-native where a C++ compiler is found to build it (it is ~1.1-1.2x faster per decode step), else
    the reference, with a warning that says why. Asking for cpu-native explicitly, or a failed build where
    a compiler exists, is an error, never a fallback."""
    from tgi.backends.cpu import native

    if native.compiler_found():
        return "cpu-native"
    log.warning("attention cpu-sdpa: no C++ compiler found (cpu-native compiles its decode kernel at start)")
    return "cpu-sdpa"


class CpuBackend(TorchBackend):
    name = "cpu"
    process_group_backend = "gloo"
    # host memory is shared with the OS and every other process: without --max-batch-total-tokens the KV
    # cache takes a quarter of the available memory (on 24 GiB, ~5 GiB: ~220k tokens of the default model)
    kv_cache_memory_fraction = 0.25

    def __init__(self, num_threads: int | None = None) -> None:
        self._info = cpu_info()
        # one intra-op thread per core we may run on (more only adds contention with the server's threads),
        # unless the user asked for a number with OMP_NUM_THREADS
        env_threads = os.environ.get("OMP_NUM_THREADS", "")
        pinned = num_threads or (int(env_threads) if env_threads.isdigit() else 0)
        self._threads = pinned or self._info.cores
        self._pinned = bool(pinned)
        self._small_step_tokens = 0  # until a server shares the cores (serve_beside_event_loop)
        self._step_threads = self._threads
        torch.set_num_threads(self._threads)
        self.attention_name = default_attention()

    def devices(self) -> list[DeviceInfo]:
        return [DeviceInfo(0, self._info.describe(), self._info.total_memory)]

    def memory_info(self) -> MemoryInfo:
        info = cpu_info()
        return MemoryInfo(total=info.total_memory, free=info.available_memory)

    def supported_dtypes(self) -> tuple[str, ...]:
        return ("float32", "bfloat16")

    def default_dtype(self) -> str:
        # bfloat16 wherever the CPU computes it natively (the GGUF blocks are then read as stored, half the
        # bytes of float32 elsewhere); float32 where bfloat16 would be emulated, slower than float32 itself
        return "bfloat16" if self._info.has_native_bf16 else "float32"

    def default_dtype_reason(self) -> str:
        if self._info.has_amx_bf16:
            return "this CPU multiplies bfloat16 natively (AMX)"
        if self._info.has_avx512_bf16:
            return "this CPU multiplies bfloat16 natively (AVX512-BF16)"
        return "this CPU has no native bfloat16 arithmetic (AMX or AVX512-BF16): bfloat16 would be emulated"

    def describe_kernels(self, dtype: str) -> dict[str, str]:
        from tgi.backends.cpu import native
        from tgi.backends.cpu.kernels import kernel_plan
        from tgi.backends.cpu.linear import block_rows

        built = native.available()
        impls = native.block_impls() if built else []
        blocks = self.blocks_for(dtype)
        rows = block_rows(dtype, impls) if blocks else 0
        plan = kernel_plan(self._info, dtype, self.attention_name, built, impls, rows, blocks)
        small = 0 if self._pinned else small_step_tokens()  # what serve_beside_event_loop turns on
        less = (
            f" ({self._threads - 1} for steps of at most {small} tokens when serving)"
            if self._threads > 1 and small
            else ""
        )
        plan["threads"] = f"{self._threads}{less}"
        plan["lora"] = self.lora_ops().describe(getattr(torch, dtype))
        return plan

    def serve_beside_event_loop(self) -> None:
        # small steps leave a core to the server, unless the user pinned the thread count
        self._small_step_tokens = 0 if self._pinned else small_step_tokens()

    def step_threads(self, num_tokens: int) -> int:
        """Intra-op threads for a step of `num_tokens` tokens: all of them; when serving (see
        `serve_beside_event_loop`), one less for a step of at most `TGI_CPU_SMALL_STEP_TOKENS` (default 8)
        tokens. Such a step is too short to split well, and the free core runs the server (event loop, HTTP)
        meanwhile: an OpenMP team that loses a core to it mid-step waits for it. Measured on 2 cores (AMD
        EPYC, bfloat16): serving at C=1, ITL p50 10.4 -> 7.5 ms with the whole step on one thread; offline
        (nothing else running) a batch-1 step is faster on both, 5.3 vs 7.2 ms, so it keeps them."""
        if self._threads > 1 and num_tokens <= self._small_step_tokens:
            return self._threads - 1
        return self._threads

    def begin_step(self, num_tokens: int) -> None:
        threads = self.step_threads(num_tokens)
        if threads != self._step_threads:
            torch.set_num_threads(threads)
            self._step_threads = threads

    def torch_device(self) -> torch.device:
        return torch.device("cpu")

    def prepare_model(self, model: torch.nn.Module) -> None:
        from tgi.backends.cpu.fused import attach_fused_ops
        from tgi.backends.cpu.linear import prepack_linears, prepacking_supported

        # bfloat16 products run on AMX / AVX-512-BF16 through oneDNN: pack their weights once
        # (TGI_CPU_PREPACK=0 turns it off, to compare)
        if (
            self._info.has_avx512_bf16
            and prepacking_supported()
            and os.environ.get("TGI_CPU_PREPACK", "1") != "0"
        ):
            prepack_linears(model)
        # quantized linears (GGUF blocks, GPTQ, AWQ, int8, fp8) get their kernels from `quantized_linear`
        # RMSNorm, rotary and SiLU-mul as one native call each (TGI_CPU_FUSED=0 keeps the torch ops)
        if _fused_ops_enabled():
            attach_fused_ops(model)

    def weight_formats(self, dtype: str) -> dict[str, str]:
        from tgi.backends.cpu.quant_linear import BNB_FORMATS, CPU_FORMATS, bnb_available

        if dtype not in ("bfloat16", "float32"):
            return {}
        formats = dict(CPU_FORMATS)
        if bnb_available():
            formats.update(BNB_FORMATS)
        for qtype in sorted(self.block_weight_types(dtype)):
            formats[f"gguf-{qtype}"] = "cpu-native block linear (small inputs), dense beyond"
        return formats

    def check_weight_format(self, weight_format: str, dtype: str) -> None:
        if weight_format.startswith("bnb-") and dtype in ("bfloat16", "float32"):
            from tgi.backends.cpu.quant_linear import bnb_available

            if not bnb_available():
                from tgi.core.interfaces import UnsupportedError

                raise UnsupportedError(
                    f"{weight_format}: the bitsandbytes package is not installed (pip install 'tgi[bnb]')"
                )
        super().check_weight_format(weight_format, dtype)

    def quantized_linear(self, weight, dtype: str):
        from tgi.backends.cpu.quant_linear import cpu_quantized_linear
        from tgi.core.loading.block_weights import BlockWeight

        if isinstance(weight, BlockWeight):
            from tgi.backends.cpu import native
            from tgi.backends.cpu.linear import BlockLinearKernel, block_rows

            return BlockLinearKernel(weight, block_rows(dtype, native.block_impls()))
        return cpu_quantized_linear(weight, dtype)

    def block_weight_types(self, dtype: str) -> frozenset[str]:
        # GGUF Q4_0/Q4_1/Q8_0 weights are computed with as stored (native kernels) for small inputs of a
        # bfloat16 model, and of a float32 one where float32 is the default (a CPU without bfloat16
        # arithmetic: the dense float32 products would read 4x the bytes). Elsewhere float32 keeps the dense
        # products, exactly transformers' arithmetic. TGI_CPU_BLOCK_KERNELS=0 turns both off;
        # TGI_CPU_BLOCK_KERNELS_F32=1/0 forces the float32 use on/off.
        if os.environ.get("TGI_CPU_BLOCK_KERNELS", "1") == "0" or not self.blocks_for(dtype):
            return frozenset()
        from tgi.backends.cpu import native

        return frozenset(native.BLOCK_TYPES) if native.available() else frozenset()

    def blocks_for(self, dtype: str) -> bool:
        """Whether a model in `dtype` computes with the GGUF blocks (see `block_weight_types`)."""
        if dtype == "bfloat16":
            return True
        forced = os.environ.get("TGI_CPU_BLOCK_KERNELS_F32", "")
        return dtype == "float32" and (forced == "1" if forced else not self._info.has_native_bf16)

    def attention_names(self) -> tuple[str, ...]:
        return ATTENTION_NAMES

    def create_attention(self, name: str) -> AttentionBackend:
        return _create_attention(name)  # raises UnsupportedError with the compiler's reason

    def create_kv_cache(self, spec: KVCacheSpec, num_blocks: int) -> KVCache:
        from tgi.backends.cpu import native
        from tgi.backends.cpu.kv_cache import CpuKVCache

        cache = CpuKVCache(spec, num_blocks)
        if _fused_ops_enabled():
            cache.native_write = native.fused().kv_write
        return cache

    def sampler(self) -> Sampler:
        from tgi.core.sampling.sampler import TorchSampler

        if not _fused_ops_enabled():
            return TorchSampler()
        from tgi.backends.cpu import native

        # greedy rows without penalties: argmax and log-softmax in one native call, no float32 copy
        return TorchSampler(greedy_kernel=native.fused().greedy_pick)

    def lora_ops(self):
        """LoRA's low-rank pairs: the native segmented pair for decode-sized steps, core's torch ops above
        (`tgi.backends.cpu.lora`)."""
        from tgi.backends.cpu.lora import CpuLoRAOps

        return CpuLoRAOps()

    def create_collective(self, rank: int, world_size: int, init_method: str | None = None) -> Collective:
        if world_size > 1:  # the ranks share this machine's cores
            self._threads = self._step_threads = max(1, self._info.cores // world_size)
            torch.set_num_threads(self._threads)
        return super().create_collective(rank, world_size, init_method)


def small_step_tokens() -> int:
    """Steps of at most this many tokens run on one thread less (`TGI_CPU_SMALL_STEP_TOKENS`, 0: never)."""
    return int(os.environ.get("TGI_CPU_SMALL_STEP_TOKENS", "8"))


def _fused_ops_enabled() -> bool:
    """The native fused ops and KV writes are used unless TGI_CPU_FUSED=0 or the native code cannot build."""
    from tgi.backends.cpu import native

    return os.environ.get("TGI_CPU_FUSED", "1") != "0" and native.available()


def _create_attention(name: str) -> AttentionBackend:
    from tgi.backends.cpu.attention import CpuAttention, CpuNativeAttention
    from tgi.backends.cpu.native import NativeBuildError
    from tgi.core.interfaces import UnsupportedError

    if name == "cpu-sdpa":
        return CpuAttention()
    try:
        return CpuNativeAttention()
    except NativeBuildError as e:  # never fall back silently: the user picks the reference explicitly
        raise UnsupportedError(
            f"attention 'cpu-native' is unavailable: {e} (use --attention cpu-sdpa)"
        ) from e
