"""The CPU backend: the reference every test runs, and a fast path for AVX-512/AMX machines."""

from __future__ import annotations

import ctypes
import logging
import os

import torch

from tgi.backends.cpu.attention_choice import ATTENTION_NAMES, create_attention, default_attention
from tgi.backends.cpu.cpuinfo import cpu_info
from tgi.backends.cpu.step_threads import StepThreadChooser, small_step_tokens, step_thread_policy
from tgi.core.interfaces import Collective, DeviceInfo, KVCacheSpec, MemoryInfo
from tgi.core.torch import AttentionBackend, KVCache, Sampler, TorchBackend

log = logging.getLogger(__name__)


class CpuBackend(TorchBackend):
    name = "cpu"
    process_group_backend = "gloo"
    # host memory is shared with the OS and every other process: without --max-batch-total-tokens the KV
    # cache takes a quarter of the available memory (on 24 GiB, ~5 GiB: ~220k tokens of the default model)
    kv_cache_memory_fraction = 0.25
    # the KV cache is a share of host memory, not sized by profiling the warm-up: a prefill of the whole
    # step budget, or a decode of --max-num-seqs sequences, would only cost start-up time (on 2 Zen 1
    # cores the 1B-class Q4_K_M file took 8.0 s for a 256-token prefill and 9.3 s for 256 decodes). 80
    # tokens take the dense (oneDNN) products above the AVX-512 CPUs' 64 block rows, the block kernels and
    # the prefill attention; 16 decodes the block kernels' many-row loops and the decode attention
    warmup_prefill_tokens = 80
    warmup_decode_seqs = 16

    def __init__(self, num_threads: int | None = None) -> None:
        self._info = cpu_info()
        # one intra-op thread per core we may run on (more only adds contention with the server's threads),
        # unless the user asked for a number with OMP_NUM_THREADS
        env_threads = os.environ.get("OMP_NUM_THREADS", "")
        pinned = num_threads or (int(env_threads) if env_threads.isdigit() else 0)
        self._threads = pinned or self._info.cores
        self._pinned = bool(pinned)
        self._chooser: StepThreadChooser | None = None  # until a server shares the cores
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
        from tgi.backends.cpu.kernel_plan import kernel_plan
        from tgi.backends.cpu.linear import block_rows

        built = native.available()
        impls = native.block_impls() if built else []
        blocks = self.blocks_for(dtype)
        rows = block_rows(dtype, impls, flags=self._info.flags) if blocks else 0
        plan = kernel_plan(self._info, dtype, self.attention_name, built, impls, rows, blocks)
        if self.batch_invariant:
            plan.update(_invariant_plan(plan, dtype, blocks))
        plan["threads"] = f"{self._threads}{self._serving_threads_note()}"
        plan["lora"] = (
            "refused (--deterministic)"
            if self.batch_invariant
            else self.lora_ops().describe(getattr(torch, dtype))
        )
        return plan

    def use_batch_invariant_kernels(self, dtype: str) -> None:
        """`--deterministic`: the GGUF block linears take every row count on one implementation
        (`invariant_block_impl`), other linears compute one row at a time, prefill attention runs the paged
        decode kernel for each query (one order per query: its own keys, oldest first, however the prompt
        was chunked or cached), the sampler treats each row alone, and the thread count stays fixed.
        Refused where the native kernels do not build, with `--attention cpu-sdpa`, and with
        `TGI_CPU_FUSED=0` (the torch norm's reductions are not checked)."""
        from tgi.backends.cpu import native
        from tgi.core.interfaces import UnsupportedError

        if not native.available():
            raise UnsupportedError(
                "the cpu backend's batch-invariant kernels are native C++ and do not build here "
                "(a C++ compiler is needed)"
            )
        if self.attention_name != "cpu-native":
            raise UnsupportedError(
                f"the cpu backend's attention '{self.attention_name}' (torch's SDPA) blocks its sums by the "
                "chunk's and the batch's lengths: use --attention cpu-native"
            )
        if not _fused_ops_enabled():
            raise UnsupportedError(
                "the cpu backend needs its fused native ops (TGI_CPU_FUSED=0 is set): the torch ops they "
                "replace are not checked to be batch-invariant"
            )
        self.batch_invariant = True
        self._attention = None  # made again, in its batch-invariant mode
        self._chooser = None

    def serve_beside_event_loop(self) -> None:
        # from now on small steps share the cores with the server's event loop: their thread count is
        # chosen (`tgi.backends.cpu.step_threads`), unless the user pinned it or asked for --deterministic
        # (the row-at-a-time products of dense weights may split their sums by the thread count)
        self._chooser = None
        small = small_step_tokens()
        if self._pinned or self._threads < 2 or small <= 0 or self.batch_invariant:
            return
        policy = step_thread_policy()
        if policy == "auto":
            self._chooser = StepThreadChooser(self._threads, small)
        elif policy == "fewer":
            self._chooser = _FixedFewer(self._threads, small)

    def release_loading_thread(self) -> None:
        # the loader's idle OpenMP pool would slow every parallel region of the engine's thread (see
        # `native.release_openmp_threads`): the 1B-class Q4_K_M file's decode on 2 cores of an AMD EPYC Zen 4
        # 33-38 -> 26-31 ms a token
        from tgi.backends.cpu import native

        if native.available():
            native.release_openmp_threads()

    def _serving_threads_note(self) -> str:
        """What `serve_beside_event_loop` will do, for the start-up line and `/info`."""
        small = small_step_tokens()
        if self.batch_invariant:
            return " (fixed: --deterministic)"
        if self._pinned or self._threads < 2 or small <= 0:
            return ""
        policy = step_thread_policy()
        if policy == "all":
            return ""
        if policy == "fewer":
            return f" ({self._threads - 1} for steps of at most {small} tokens when serving)"
        return (
            f" ({self._threads - 1} or {self._threads} for steps of at most {small} tokens when serving, "
            "whichever cycles faster as measured)"
        )

    def release_memory(self) -> None:
        # torch returns the storage of small and mid-sized tensors to glibc's heap, which keeps the pages
        # (only allocations above its mmap threshold go back to the OS when freed): trim it
        trim = getattr(ctypes.CDLL(None), "malloc_trim", None)  # glibc only
        if trim is not None:
            trim(0)

    def step_threads(self, num_tokens: int) -> int:
        """Intra-op threads for a step of `num_tokens` tokens: all of them offline; when serving (see
        `serve_beside_event_loop`), for a step of at most `TGI_CPU_SMALL_STEP_TOKENS` (default 32) tokens,
        all or one fewer as `TGI_CPU_STEP_THREADS` says: `auto` (default) measures the step cycle with both
        and keeps the faster (`StepThreadChooser`; each call is a step's start), `fewer` always leaves the
        event loop a core, `all` never does. Measured on 2 cores serving one request: the default model's
        step is faster on one thread (AMD EPYC, bfloat16: ITL p50 10.4 -> 7.5 ms), a 1B-class model's on
        both (Intel Xeon, Q4_K_M: ITL 103 -> 66 ms)."""
        if self._chooser is None:
            return self._threads
        return self._chooser.choose(num_tokens)

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

        if self.batch_invariant:
            from tgi.backends.cpu.linear import attach_row_at_a_time

            attach_row_at_a_time(model)  # dense weights; the GGUF blocks' kernel comes from the seam
        # bfloat16 products run on AMX / AVX-512-BF16 through oneDNN: pack their weights once
        # (TGI_CPU_PREPACK=0 turns it off, to compare)
        elif (
            self._info.has_avx512_bf16
            and prepacking_supported()
            and os.environ.get("TGI_CPU_PREPACK", "1") != "0"
        ):
            from tgi.backends.cpu import native
            from tgi.backends.cpu.linear import max_block_rows

            built = os.environ.get("TGI_CPU_BLOCK_KERNELS", "1") != "0" and native.available()
            prepack_linears(model, max_block_rows(native.block_impls()) if built else 0)
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

    def gguf_dequantizer(self, dtype: str):
        """GGUF tensors dequantized natively in one pass each (`tgi.backends.cpu.gguf_dequant`), where the
        native kernels build; else `gguf`'s numpy dequantization (the same values, slower), said in the log."""
        from tgi.backends.cpu import native
        from tgi.backends.cpu.gguf_dequant import NativeGGUFDequantizer

        if dtype not in ("bfloat16", "float32"):
            return None
        if not native.available():
            log.warning(
                "GGUF weights dequantized by gguf's numpy code: the native CPU kernels do not build here"
            )
            return None
        return NativeGGUFDequantizer(getattr(torch, dtype))

    def quantized_linear(self, weight, dtype: str):
        from tgi.backends.cpu.quant_linear import cpu_quantized_linear
        from tgi.core.loading.block_weights import BlockWeight

        if isinstance(weight, BlockWeight):
            from tgi.backends.cpu.linear import BlockLinearKernel, invariant_block_impl

            rows = self._block_kernel_rows(weight.qtype, dtype)
            if self.batch_invariant:
                return BlockLinearKernel(weight, rows, invariant_block_impl(weight.qtype, dtype))
            return BlockLinearKernel(weight, rows)
        if self.batch_invariant:
            from tgi.backends.cpu.linear import RowAtATimeKernel

            return RowAtATimeKernel(cpu_quantized_linear(weight, dtype))
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

    def _block_kernel_rows(self, qtype: str, dtype: str) -> int | None:
        """The row limit of `quantized_linear`'s block kernel for `qtype` (None: every row count): none in
        --deterministic mode, else the CPU's (`block_rows`: the K-quants on int8 inputs where the CPU has no
        AVX-512 take every row count)."""
        if self.batch_invariant:
            return None
        from tgi.backends.cpu import native
        from tgi.backends.cpu.linear import block_rows

        return block_rows(dtype, native.block_impls(), qtype)

    def standalone_block_types(self, dtype: str) -> frozenset[str]:
        return frozenset(
            q for q in self.block_weight_types(dtype) if self._block_kernel_rows(q, dtype) is None
        )

    def blocks_for(self, dtype: str) -> bool:
        """Whether a model in `dtype` computes with the GGUF blocks (see `block_weight_types`)."""
        if dtype == "bfloat16":
            return True
        # (--deterministic: float32 too, where its dense products would go one row at a time)
        forced = os.environ.get("TGI_CPU_BLOCK_KERNELS_F32", "")
        default = self.batch_invariant or not self._info.has_native_bf16
        return dtype == "float32" and (forced == "1" if forced else default)

    def attention_names(self) -> tuple[str, ...]:
        return ATTENTION_NAMES

    def create_attention(self, name: str) -> AttentionBackend:
        # raises UnsupportedError with the compiler's reason
        return create_attention(name, self.batch_invariant)

    def kv_cache_dtypes(self, dtype: str) -> tuple[str, ...]:
        # both attentions read the quantized caches: cpu-sdpa dequantizes the blocks it gathers, cpu-native's
        # kernels read the codes and scales (docs/features/kv-cache-quantization.md)
        return ("auto", "fp8_e4m3fn", "fp8_e5m2", "int8")

    def create_kv_cache(self, spec: KVCacheSpec, num_blocks: int) -> KVCache:
        from tgi.backends.cpu.kv_cache import create_cpu_kv_cache

        return create_cpu_kv_cache(spec, num_blocks, native_writes=_fused_ops_enabled())

    def sampler(self) -> Sampler:
        from tgi.core.sampling.sampler import TorchSampler

        if not _fused_ops_enabled():
            return TorchSampler()
        from tgi.backends.cpu import native

        # greedy rows without penalties: argmax and log-softmax in one native call, no float32 copy;
        # --deterministic: each row sampled alone
        return TorchSampler(greedy_kernel=native.fused().greedy_pick, per_row=self.batch_invariant)

    def lora_ops(self):
        """LoRA's low-rank pairs: the native segmented pair for decode-sized steps, core's torch ops above
        (`tgi.backends.cpu.lora`)."""
        from tgi.backends.cpu.lora import CpuLoRAOps

        if self.batch_invariant:
            from tgi.core.interfaces import UnsupportedError

            raise UnsupportedError(
                "LoRA adapters with --deterministic: the cpu backend's LoRA products (native for small "
                "steps, torch's above) are not batch-invariant"
            )
        return CpuLoRAOps()

    def create_collective(self, rank: int, world_size: int, init_method: str | None = None) -> Collective:
        if world_size > 1:  # the ranks share this machine's cores
            self._threads = self._step_threads = max(1, self._info.cores // world_size)
            torch.set_num_threads(self._threads)
        return super().create_collective(rank, world_size, init_method)


class _FixedFewer:
    """`TGI_CPU_STEP_THREADS=fewer`: steps of at most `max_tokens` tokens always run on one thread fewer."""

    def __init__(self, all_threads: int, max_tokens: int) -> None:
        self.all, self.max_tokens = all_threads, max_tokens

    def choose(self, num_tokens: int) -> int:
        return self.all - 1 if num_tokens <= self.max_tokens else self.all


def _fused_ops_enabled() -> bool:
    """The native fused ops and KV writes are used unless TGI_CPU_FUSED=0 or the native code cannot build."""
    from tgi.backends.cpu import native

    return os.environ.get("TGI_CPU_FUSED", "1") != "0" and native.available()


def _invariant_plan(plan: dict[str, str], dtype: str, blocks: bool) -> dict[str, str]:
    """What `--deterministic` changes in `kernel_plan`'s lines."""
    from tgi.backends.cpu.linear import invariant_block_impl

    out = {"dense linear": f"{plan['dense linear']}, one row at a time (--deterministic)"}
    if blocks:
        amx = invariant_block_impl("Q4_1", dtype)
        other = invariant_block_impl("Q4_K", dtype)
        which = amx if amx == other else f"{amx} (Q4_0, Q4_1, Q8_0), {other} (others)"
        out["gguf block linear"] = f"{which} for every row count (--deterministic)"
    out["prefill attention"] = "cpu-native decode kernel for each query (--deterministic)"
    out["sampler"] = "each row alone (--deterministic)"
    return out
