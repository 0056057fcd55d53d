"""The Gaudi runner: core's torch models in static row-shaped steps, an HPU graph per decode bucket.

Each step is padded to a bucket of `tgi.core.static_shapes.rows.RowShapes` (TGI Gaudi's layout and bucket
rules): a prefill step is `[B, L]` (B prefill rows, chunks padded to L tokens), a decode step `[B, 1]`,
both with block tables padded to a width bucket W. The scheduler is told these limits through
`constraints()` (no mixed steps, chunk lengths up to the largest L, at most the largest B sequences, a
prefill step's padded area B x L within --max-batch-prefill-tokens), so every batch it builds fits a
bucket that `warmup()` ran before serving:

* prefill shapes run eagerly in lazy mode: `mark_step()` compiles each shape's recipe once (at warm-up);
* decode shapes run through one module wrapped by `HpuDevice.wrap_in_hpu_graph`, which records an HPU graph
  on the first call with each (B, W) and replays it afterwards; warm-up makes every first call.

Padding never reaches an output: padded tokens write their keys/values to the cache's pad slot, padded rows
and positions attend to slot 0 only (finite, ignored), and only the real sampled rows are sampled.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import numpy as np
import torch

from tgi.backends.gaudi.attention import ROWS_KEY, Rows
from tgi.core.config import ConfigError
from tgi.core.interfaces import ModelInfo, RunnerCapabilities, RunnerConstraints, UnsupportedError
from tgi.core.interfaces.batch import ScheduledBatch, StepOutput
from tgi.core.models.context import AttentionContext
from tgi.core.static_shapes.buckets import Buckets
from tgi.core.static_shapes.rows import RowBatch, RowShape, RowShapes
from tgi.core.torch.attention import AttentionMetadata
from tgi.core.torch.runner import TorchModelRunner

if TYPE_CHECKING:
    from tgi.backends.gaudi.backend import GaudiBackend

log = logging.getLogger(__name__)


def row_metadata(slots: torch.Tensor, prefill: Rows | None, decode: Rows | None) -> AttentionMetadata:
    """Metadata of a row step: every token on the flat axis is a prefill token (prefill steps) or a decode
    query (decode steps); the attention reads the rows from `extra` (core's ragged fields stay empty)."""
    empty = torch.zeros(0, dtype=torch.int32, device=slots.device)
    n = slots.shape[0]
    return AttentionMetadata(
        slot_mapping=slots, num_prefill_tokens=n if prefill is not None else 0,
        num_decode_tokens=n if decode is not None else 0, query_start_loc=empty, prefill_seq_lens=empty,
        prefill_block_tables=empty.view(0, 0), max_query_len=0, max_prefill_seq_len=0, decode_seq_lens=empty,
        decode_block_tables=empty.view(0, 0), max_decode_seq_len=0,
        extra={ROWS_KEY: {"prefill": prefill, "decode": decode}},
    )  # fmt: skip


class DecodeStep(torch.nn.Module):
    """One decode step over padded rows, as a module so that `wrap_in_hpu_graph` can record it: inputs
    input_ids/positions/slots/context_lens [B], block_tables [B, W] (int64) -> hidden states [B, hidden]."""

    def __init__(self, runner: GaudiModelRunner) -> None:
        super().__init__()
        self.model = runner.model
        self.attention = runner.attention
        self.kv_cache = runner.kv_cache

    def forward(self, input_ids, positions, slots, block_tables, context_lens):
        rows = Rows(None, positions[:, None], block_tables, context_lens)
        meta = row_metadata(slots, None, rows)
        return self.model(input_ids, positions, AttentionContext(self.attention, self.kv_cache, meta))


class GaudiModelRunner(TorchModelRunner):
    """`TorchModelRunner`'s loading, with static row-shaped steps (module docstring)."""

    def __init__(self, backend: GaudiBackend, source, config, collective) -> None:
        super().__init__(backend, source, config, collective)
        self.shapes: RowShapes | None = None
        self.decode_graph = None
        self.warmed: set[RowShape] = set()

    def load(self) -> ModelInfo:
        if self.config.lora_adapters:
            raise ConfigError("--lora-adapters: the gaudi backend's runner does not serve LoRA adapters")
        info = super().load()
        if any(getattr(m, "needs_seq_lens", False) for m in self.model.modules()):
            raise UnsupportedError(
                "the gaudi runner cannot run a rotary embedding that depends on the sequence length "
                "(long-context rope scaling): its row steps carry no per-token sequence lengths"
            )
        return info

    def capabilities(self) -> RunnerCapabilities:
        return RunnerCapabilities(token_masks=self.sampler.supports_token_masks, prompt_top_logprobs=True)

    def constraints(self) -> RunnerConstraints:
        if self.shapes is None:
            raise RuntimeError("the gaudi runner's buckets are chosen at warm-up: call warmup() first")
        return self.shapes.constraints(chunked_prefill=True)

    def make_shapes(self, max_batch_tokens: int, max_num_seqs: int) -> RowShapes:
        """TGI Gaudi's buckets for these limits: decode batches and prefill batches in multiples of their
        bucket steps up to `max_num_seqs`, prefill chunks in multiples of PAD_SEQUENCE_TO_MULTIPLE_OF up to
        the step budget, block-table widths in powers of two up to the longest context. The step budget
        (--max-batch-prefill-tokens) also bounds a prefill step's padded area `B x L`, as in TGI Gaudi, so
        no prefill graph is larger than that; a budget below the smallest prefill shape is refused."""
        b, bs = self.backend.buckets, self.config.block_size
        # the longest context: --max-total-tokens when given (the engine's limit), else the model's
        longest = self.config.max_total_tokens or getattr(self.hf_config, "max_position_embeddings", 4096)
        context = min(self.kv_cache.num_blocks * bs, longest)
        smallest = min(b.prefill_batch, max_num_seqs) * min(b.sequence, max_batch_tokens)
        if smallest > max_batch_tokens:
            raise ConfigError(
                f"--max-batch-prefill-tokens {max_batch_tokens} is below the smallest padded prefill step "
                f"({min(b.prefill_batch, max_num_seqs)} rows (PREFILL_BATCH_BUCKET_SIZE) x "
                f"{min(b.sequence, max_batch_tokens)} tokens (PAD_SEQUENCE_TO_MULTIPLE_OF)): raise it or "
                "lower those bucket sizes"
            )
        return RowShapes(
            decode_buckets=Buckets.multiples(min(b.batch, max_num_seqs), max_num_seqs),
            prefill_batch_buckets=Buckets.multiples(min(b.prefill_batch, max_num_seqs), max_num_seqs),
            prefill_buckets=Buckets.multiples(min(b.sequence, max_batch_tokens), max_batch_tokens),
            block_buckets=Buckets.powers_of_two(-(-context // bs)),
            block_size=bs,
            max_padded_prefill_tokens=max_batch_tokens,
        )

    @torch.inference_mode()  # as the steps it prepares: graphs are recorded as they will be replayed
    def warmup(self, max_batch_tokens: int, max_num_seqs: int) -> None:
        """Choose the buckets and run every shape a step can take (`RowShapes.warmup_shapes`) once, on
        padding only: prefill recipes compile, decode graphs are recorded."""
        self.shapes = self.make_shapes(max_batch_tokens, max_num_seqs)
        self.decode_graph = self.backend.hpu.wrap_in_hpu_graph(DecodeStep(self))
        shapes = self.shapes.warmup_shapes()
        for shape in shapes:
            self._forward(self._padding(shape))
            self.warmed.add(shape)
        self.backend.synchronize()
        log.info(
            "gaudi warm-up: %d shapes (%d decode graphs)", len(shapes), sum(not s.is_prefill for s in shapes)
        )

    def _padding(self, shape: RowShape) -> RowBatch:
        """A step of `shape` that is all padding."""
        b, length, w = shape.num_rows, shape.row_len, shape.num_blocks
        zeros = np.zeros((b, length), np.int32)
        return RowBatch(
            shape, zeros, zeros, np.full((b, length), self.kv_cache.pad_slot, np.int32),
            np.zeros((b, w), np.int32), np.zeros(b, np.int32), np.zeros(b, np.int32), np.zeros(b, np.int32),
            np.zeros(0, np.int32), [],
        )  # fmt: skip

    def _forward(self, rows: RowBatch) -> torch.Tensor:
        """Hidden states of every padded position: [B * L, hidden] (prefill) or [B, hidden] (decode)."""

        def t(a: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(a).to(device=self.device, dtype=torch.int64)

        ids, pos, slots = t(rows.input_ids), t(rows.positions), t(rows.slot_mapping)
        tables, lens = t(rows.block_tables), t(rows.context_lens)
        if rows.shape.is_prefill:
            meta = row_metadata(slots.view(-1), Rows(None, pos, tables, lens), None)
            ctx = AttentionContext(self.attention, self.kv_cache, meta)
            hidden = self.model(ids.view(-1), pos.view(-1), ctx)
        else:
            hidden = self.decode_graph(ids[:, 0], pos[:, 0], slots[:, 0], tables, lens)
        self.backend.hpu.mark_step()
        return hidden

    @torch.inference_mode()
    def execute(self, batch: ScheduledBatch) -> StepOutput:
        rows = self.shapes.pad(batch, self.kv_cache.pad_slot)
        if rows.shape not in self.warmed:  # the scheduler honours constraints(): this is a bug
            raise RuntimeError(f"step shape {rows.shape} was not warmed up")
        hidden = self._forward(rows)
        length = rows.shape.row_len
        output = StepOutput(request_ids=[], token_ids=[], logprobs=[])
        if rows.num_sampled:  # tensor parallel: every rank computes the logits, rank 0 alone samples
            picked = rows.sampled_rows.astype(np.int64) * length + rows.sample_index[rows.sampled_rows]
            logits = self.model.compute_logits(
                hidden.index_select(0, torch.from_numpy(picked).to(self.device))
            )
        if rows.num_sampled and self.collective.rank == 0:
            result = self.sampler.sample(logits, rows.sampled, batch.token_masks)
            output.request_ids = [s.request_id for s in rows.sampled]
            output.token_ids = result.token_ids.tolist()
            output.logprobs = result.logprobs.tolist()
            if result.top_token_ids is not None:
                output.top_token_ids = result.top_token_ids.tolist()
                output.top_logprobs = result.top_logprobs.tolist()
        for r, s in enumerate(batch.sequences):
            if s.want_prompt_logprobs and s.is_prefill:
                own = hidden[r * length : r * length + s.num_tokens]
                self._prompt_logprobs(output, own, s)
        return output
