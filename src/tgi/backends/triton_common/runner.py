"""Core's torch runner, plus what a GPU needs: an activation-memory profile before the KV cache is sized,
and (optionally) CUDA graphs for decode steps."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from tgi.core.torch.runner import TorchModelRunner

if TYPE_CHECKING:
    from tgi.core.config import EngineConfig
    from tgi.core.interfaces import Collective, ModelInfo
    from tgi.core.loading.source import ModelSource
    from tgi.core.torch import TorchBackend

log = logging.getLogger(__name__)


def row_count_buckets(most: int) -> tuple[int, ...]:
    """1, 2, 4, ... up to `most`, and `most`: a step of any token count up to `most` falls in the power-of-two
    bucket of one of them (`quant_int.row_bucket`)."""
    counts = [1 << i for i in range(max(1, most).bit_length()) if 1 << i < most]
    return (*counts, max(1, most))


class TritonModelRunner(TorchModelRunner):
    """`TorchModelRunner` for CUDA/ROCm devices.

    * `load()` ends with `profile_activation_memory()`: the largest prefill and decode the scheduler may
      build run once on a temporary KV cache, and the peak beyond the weights is handed to the backend
      (`reserve_activation_memory`), so that the engine sizes the KV cache from what is really left — what
      TGI's warm-up does to compute `max_batch_total_tokens`.
    * `warmup()` launches every Triton kernel variant a serving step may launch
      (`compile_kernel_variants`), so that none compiles while serving, then captures CUDA graphs for
      decode steps when `cuda_graphs` is on (see `graphs.py`).
    """

    def __init__(
        self,
        backend: TorchBackend,
        source: ModelSource,
        config: EngineConfig,
        collective: Collective,
        cuda_graphs: bool = False,
    ) -> None:
        super().__init__(backend, source, config, collective)
        self.cuda_graphs = cuda_graphs
        self.graphed = None

    def load(self) -> ModelInfo:
        info = super().load()
        if self.device.type == self.backend.device_type:  # not on the CPU tensors of the interpreter tests
            self.profile_activation_memory()
        return info

    def profile_activation_memory(self) -> int:
        """Peak bytes a step allocates beyond the weights (and beyond the temporary cache); reported to the
        backend and returned."""
        from tgi.core.engine_startup import DEFAULT_MAX_BATCH_PREFILL_TOKENS

        tokens = self.config.max_batch_prefill_tokens or DEFAULT_MAX_BATCH_PREFILL_TOKENS
        num_blocks = max(1, -(-tokens // self.config.block_size))
        dm = self.backend.device_module  # torch.cuda or torch.xpu
        dm.synchronize(self.device)
        dm.empty_cache()
        dm.reset_peak_memory_stats(self.device)
        base = dm.memory_allocated(self.device)
        self.initialize_cache(num_blocks)
        cache_bytes = self.kv_cache.nbytes()
        try:
            super().warmup(tokens, self.config.max_num_seqs)
            dm.synchronize(self.device)
            peak = dm.max_memory_allocated(self.device) - base - cache_bytes
        finally:
            self.kv_cache = None
            dm.empty_cache()
        peak = int(peak * 1.1)  # the allocator rounds and fragments; keep a tenth more
        if hasattr(self.backend, "reserve_activation_memory"):
            self.backend.reserve_activation_memory(peak)
        log.info(
            "activation peak %.0f MiB (%d-token prefill, %d decodes)",
            peak / 2**20,
            tokens,
            self.config.max_num_seqs,
        )
        return peak

    def shutdown(self) -> None:
        """Also drop the captured decode graphs (they hold the weights and the KV cache)."""
        self.graphed = None
        super().shutdown()

    def compile_kernel_variants(self, max_batch_tokens: int) -> dict[str, tuple]:
        """Launch once every Triton kernel variant a serving step can launch, so that each compiles here
        rather than in a step (about a second's stall on a GPU). A variant is a kernel's constexprs, launch
        options, tensor dtypes and the specialisation of its integer and pointer arguments; what a step
        varies, and how each is covered:

        * the model (its layers, dtype, head size, quantized formats, window, soft-cap): fixed at load; every
          layer runs in each pass below;
        * the token count: the kernels do not specialise on it (row and pair counts, the block table's width
          and the metadata's alignment are `do_not_specialize`d); the one choice made from it, a quantized
          GEMM's split along K, is made per power of two (`quant_int.row_bucket`): on a device where it is
          made (`quant_int.splits_by_rows`) one prefill of each of `row_count_buckets(max_batch_tokens)`
          tokens runs every bucket a step can fall in, elsewhere one prefill of the most tokens runs (the
          prefill attention, KV write, fused norm/rotary/SiLU and MoE kernels with them);
        * LoRA: with adapters loaded at start, those passes run under the first of them (the kernels' ranks
          are the stacked ranks of the adapters loaded: one loaded later with a larger rank compiles at its
          first step);
        * decode splits: one decode per split count (`compile_decode_variants`).

        Sampling is torch code (`TorchSampler`): no Triton kernel. Returns what ran: the prefill token counts
        under "rows", the split counts under "decode_splits"."""
        from tgi.backends.triton_common.kernels.quant_int import splits_by_rows
        from tgi.core.interfaces.batch import ScheduledBatch, ScheduledSequence
        from tgi.core.sampling_params import SamplingParams

        bs = self.config.block_size
        most = min(max_batch_tokens, self.kv_cache.num_blocks * bs)
        adapter = self.lora.names[0] if self.lora is not None and self.lora.names else None
        params = SamplingParams(adapter_id=adapter)
        rows = row_count_buckets(most) if splits_by_rows(self.device) else (max(1, most),)
        for n in rows:  # written into blocks no request owns yet (the cache is empty before serving)
            seq = ScheduledSequence(
                "variants", [0] * n, 0, list(range(-(-n // bs))), True, True, params, 0, n, [0] * n
            )
            self.execute(ScheduledBatch(0, [seq], 1))
        splits = self.compile_decode_variants()
        self.backend.synchronize()
        return {"rows": rows, "decode_splits": splits}

    def compile_decode_variants(self) -> tuple[int, ...]:
        """One decode forward of one sequence for each split count the attention may pick
        (`TritonAttention.decode_split_choices`), on every layer: Triton compiles a kernel variant per split
        count (and layer kind: window, soft-cap) at its first launch, which would otherwise stall a serving
        step. Nothing is written to the cache (slot -1). Returns the split counts run."""
        import torch

        from tgi.backends.triton_common.attention import NUM_SPLITS_KEY
        from tgi.core.models.context import AttentionContext
        from tgi.core.torch.attention import AttentionMetadata

        choices = getattr(self.attention, "decode_split_choices", None)
        if choices is None:  # an attention without split variants
            return ()
        device = self.device
        i32 = lambda values: torch.tensor(values, dtype=torch.int32, device=device)  # noqa: E731
        length = self.config.block_size  # one full block: every split count has keys to walk
        splits_run = choices()
        with torch.inference_mode():
            for splits in splits_run:
                meta = AttentionMetadata(
                    slot_mapping=torch.full((1,), -1, dtype=torch.int64, device=device),
                    num_prefill_tokens=0, num_decode_tokens=1, query_start_loc=i32([0]),
                    prefill_seq_lens=i32([]), prefill_block_tables=i32([]).view(0, 0), max_query_len=0,
                    max_prefill_seq_len=0, decode_seq_lens=i32([length]), decode_block_tables=i32([[0]]),
                    max_decode_seq_len=length, decode_seq_lens_host=[length],
                    extra={NUM_SPLITS_KEY: splits},
                )  # fmt: skip
                ids = torch.zeros(1, dtype=torch.int64, device=device)
                positions = torch.full((1,), length - 1, dtype=torch.int64, device=device)
                self.model(ids, positions, AttentionContext(self.attention, self.kv_cache, meta))
        return splits_run

    def warmup(self, max_batch_tokens: int, max_num_seqs: int) -> None:
        # in place of core's warm-up: its largest prefill is one of these passes, and its decode batch's row
        # count falls in the bucket of another
        self.compile_kernel_variants(max_batch_tokens)
        if self.cuda_graphs and self.lora is not None:
            # a captured graph would replay the adapters of its capture: LoRA steps run eagerly
            log.warning("CUDA graphs are off: LoRA adapters are loaded (--lora-adapters)")
        elif self.cuda_graphs and self.device.type == self.backend.device_type:
            from tgi.backends.triton_common.graphs import GraphedDecodeModel, graph_batch_sizes

            sizes = graph_batch_sizes(max_num_seqs)
            if self.config.cuda_graphs:  # --cuda-graphs: the sizes asked for, up to the batch limit
                sizes = [s for s in self.config.cuda_graphs if s <= max_num_seqs] or [max_num_seqs]
            self.graphed = GraphedDecodeModel(self, sizes)
            self.model = self.graphed  # execute() calls self.model(...): decode steps now replay graphs
