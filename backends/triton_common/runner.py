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


class TritonModelRunner(TorchModelRunner):
    """`TorchModelRunner` for CUDA/ROCm devices.

    * `load()` ends with `profile_activation_memory()`: the largest prefill and decode the scheduler may
      build run once on a temporary KV cache, and the peak beyond the weights is handed to the backend
      (`reserve_activation_memory`), so that the engine sizes the KV cache from what is really left — what
      TGI's warm-up does to compute `max_batch_total_tokens`.
    * `warmup()` compiles every kernel variant a step may pick (`compile_decode_variants`: one per decode
      split count), so that no variant compiles while serving, then captures CUDA graphs for decode steps
      when `cuda_graphs` is on (see `graphs.py`).
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
        super().warmup(max_batch_tokens, max_num_seqs)
        self.compile_decode_variants()
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
