"""CUDA graphs for decode steps — UNTESTED: written without a GPU; enable with `TGI_CUDA_GRAPHS=1`.
The same code captures XPU graphs on Intel GPUs: `torch.xpu` has the graph API of `torch.cuda`
(`XPUGraph`, `graph`, `graph_pool_handle`), reached through the backend's `device_module`.

A decode step launches a few kernels per layer with tiny shapes, so at small batch sizes the GPU waits on
the CPU's launches. Capturing the model's forward once per batch size and replaying it removes that cost.

How it works: `GraphedDecodeModel` replaces the runner's model after warm-up. For every size in
`graph_batch_sizes` (1, 2, 4, then multiples of 8 up to `max_num_seqs`, the sizes the scheduler's decode
batches are padded to) it captures one forward over static input buffers (token ids, positions, slot
mapping, sequence lengths, block tables) with a fixed number of decode splits. A decode-only step of n
sequences copies its inputs into the buffers of the smallest captured size >= n, pads the rest (slot -1:
no KV write; length 1: attends one valid slot; outputs ignored), replays, and returns the first n rows.
Prefill or mixed steps, and batches larger than the largest size, run the model eagerly. Sampling stays
outside the graph (it reads per-request parameters on the host).
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING, Any

import torch

from tgi.backends.triton_common.attention import NUM_SPLITS_KEY, TritonAttention
from tgi.core.models.context import AttentionContext
from tgi.core.torch.attention import AttentionMetadata

if TYPE_CHECKING:
    from tgi.backends.triton_common.runner import TritonModelRunner


def graph_batch_sizes(max_num_seqs: int) -> list[int]:
    """Decode batch sizes to capture: 1, 2, 4, 8, 16, 24, ... up to and including `max_num_seqs`."""
    sizes = {1, 2, 4, *range(8, max_num_seqs + 1, 8), max_num_seqs}
    return sorted(s for s in sizes if s <= max_num_seqs)


class GraphedDecodeModel:
    """Stands in for the runner's model: decode-only steps replay a captured graph, the rest run eagerly.
    Attribute access (`compute_logits`, `parameters`...) goes to the wrapped model."""

    def __init__(self, runner: TritonModelRunner, sizes: list[int]) -> None:
        if not isinstance(runner.attention, TritonAttention):
            raise ValueError(f"CUDA graphs need the triton attention, not '{runner.attention.name}'")
        self.model = runner.model
        self.kv_cache = runner.kv_cache
        self.attention = runner.attention
        self.sizes = sorted(sizes)
        device = runner.device
        bs = runner.config.block_size
        max_len = min(
            runner.kv_cache.num_blocks * bs, getattr(runner.hf_config, "max_position_embeddings", 4096)
        )
        max_n = self.sizes[-1]
        self.max_blocks = -(-max_len // bs)
        self.input_ids = torch.zeros(max_n, dtype=torch.int64, device=device)
        self.positions = torch.zeros(max_n, dtype=torch.int64, device=device)
        self.slots = torch.full((max_n,), -1, dtype=torch.int64, device=device)
        self.seq_lens = torch.ones(max_n, dtype=torch.int32, device=device)
        self.tables = torch.zeros(max_n, self.max_blocks, dtype=torch.int32, device=device)
        spec = runner.kv_cache.spec
        dm = runner.backend.device_module  # torch.cuda (CUDA, HIP) or torch.xpu: the same graph API
        graph_class = getattr(dm, runner.backend.graph_class)
        self.graphs: dict[int, Any] = {}  # size -> torch.cuda.CUDAGraph / torch.xpu.XPUGraph
        self.outputs: dict[int, torch.Tensor] = {}
        pool = dm.graph_pool_handle()
        with torch.inference_mode():
            for n in reversed(self.sizes):  # largest first: smaller graphs reuse its pool memory
                splits = self.attention.num_decode_splits(n, spec.num_kv_heads, max_len, None)
                ctx = AttentionContext(self.attention, self.kv_cache, self._meta(n, max_len, splits))
                self.model(self.input_ids[:n], self.positions[:n], ctx)  # compile the kernels first
                dm.synchronize(device)
                graph = graph_class()
                with dm.graph(graph, pool=pool):
                    self.outputs[n] = self.model(self.input_ids[:n], self.positions[:n], ctx)
                self.graphs[n] = graph
        dm.synchronize(device)

    def _meta(self, n: int, max_len: int, splits: int) -> AttentionMetadata:
        device = self.input_ids.device
        empty = torch.zeros(0, dtype=torch.int32, device=device)
        return AttentionMetadata(
            slot_mapping=self.slots[:n],
            num_prefill_tokens=0,
            num_decode_tokens=n,
            query_start_loc=torch.zeros(1, dtype=torch.int32, device=device),
            prefill_seq_lens=empty,
            prefill_block_tables=empty.view(0, 0),
            max_query_len=0,
            max_prefill_seq_len=0,
            decode_seq_lens=self.seq_lens[:n],
            decode_block_tables=self.tables[:n],
            max_decode_seq_len=max_len,
            decode_seq_lens_host=[1] * n,
            extra={NUM_SPLITS_KEY: splits},
        )

    def __call__(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        ctx: AttentionContext,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if inputs_embeds is not None:  # a prefill with image embeddings: never a captured decode
            return self.model(input_ids, positions, ctx, inputs_embeds=inputs_embeds)
        meta = ctx.meta
        n = meta.num_decode_tokens
        if meta.num_prefill_tokens or n == 0 or n > self.sizes[-1] or input_ids.shape[0] != n:
            return self.model(input_ids, positions, ctx)
        width = meta.decode_block_tables.shape[1]
        if width > self.max_blocks:
            return self.model(input_ids, positions, ctx)
        size = self.sizes[bisect.bisect_left(self.sizes, n)]
        self.input_ids[:n].copy_(input_ids)
        self.positions[:n].copy_(positions)
        self.slots[:n].copy_(meta.slot_mapping)
        self.seq_lens[:n].copy_(meta.decode_seq_lens)
        self.tables[:n, :width].copy_(meta.decode_block_tables)
        if size > n:  # padding rows: no KV write, one valid key
            self.input_ids[n:size].zero_()
            self.positions[n:size].zero_()
            self.slots[n:size].fill_(-1)
            self.seq_lens[n:size].fill_(1)
        self.graphs[size].replay()
        return self.outputs[size][:n]

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)
