"""One rank of a pipeline-parallel group: `--pipeline-parallel-size P` stages of contiguous decoder layers,
each `--num-shard T` tensor-parallel shards wide (global rank r: shard r % T of stage r // T, `stage_split.py`).

Every rank receives rank 0's step (the same `ScheduledBatch`, as deltas, like tensor parallelism) and cuts it
in the same micro-batches (`micro_batches.py`). For each micro-batch the first stage embeds the tokens, every
stage runs its layers on what the previous stage sent (the hidden states and the residual stream, [2, T, H],
point-to-point, `stage_groups.py`) and sends its own to the next without waiting for it to be received, so
stage s works on micro-batch m while stage s + 1 works on m - 1. The last stage applies the final norm and the
output head to the whole step's rows and samples them itself; its shard 0 sends the `StepOutput` (token ids,
logprobs: a few numbers a sequence) back to rank 0, which returns it to the engine. Sampling there rather than
on rank 0 keeps [rows, vocabulary] float32 logits off the wire (512 KB a row at a 128k vocabulary), and the
token masks of guided decoding already reach every rank with the step's delta.

Micro-batches per step: P (one per stage). The bubble, the idle share of a step, is (P - 1) / (M + P - 1):
a third at P = 2 rather than a half with one micro-batch; more micro-batches shrink it further, but each one
is a forward pass of its own that reads the stage's weights again (a decode step is bound by those reads), so
M = P is where the idle time saved stops paying for the passes added.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import torch

from tgi.core.dtypes import to_torch_dtype
from tgi.core.interfaces import Collective, KVCacheSpec, ModelInfo, RunnerCapabilities
from tgi.core.interfaces.batch import ScheduledBatch, StepOutput
from tgi.core.loading import load_config
from tgi.core.models.context import AttentionContext, build_attention_metadata, build_positions
from tgi.core.models.registry import model_class_for
from tgi.core.parallel.dist_auth import message_key
from tgi.core.parallel.micro_batches import split_micro_batches
from tgi.core.parallel.pipeline_model import (
    StageKVCache,
    build_stage_model,
    check_pipeline_model,
    stage_forward,
    stage_selector,
)
from tgi.core.parallel.stage_groups import StageLinks
from tgi.core.parallel.stage_split import pipeline_stage, split_layers
from tgi.core.torch.host_transfer import to_device
from tgi.core.torch.runner import TorchModelRunner

if TYPE_CHECKING:
    from tgi.core.config import EngineConfig
    from tgi.core.loading.source import ModelSource
    from tgi.core.torch.backend import TorchBackend

#: micro-batches per step for each stage (see the module's docstring)
MICRO_BATCHES_PER_STAGE = 1


class PipelineStageRunner(TorchModelRunner):
    """A `TorchModelRunner` over one stage's layers; `collective` is the whole group's (P × T ranks), the
    stage's own shards get a collective of their own (`StageLinks`)."""

    def __init__(
        self, backend: TorchBackend, source: ModelSource, config: EngineConfig, collective: Collective
    ) -> None:
        self.world = collective
        self.num_stages = config.pipeline_parallel_size
        self.links = StageLinks(
            collective, self.num_stages, config.num_shard, backend.torch_device(), message_key(collective)
        )
        super().__init__(backend, source, config, self.links.stage_collective)
        self.stage = None  # this rank's `PipelineStage`, once the model's config is read
        self.num_micro_batches = MICRO_BATCHES_PER_STAGE * self.num_stages

    def load(self) -> ModelInfo:
        hf_config = load_config(self.source)
        check_pipeline_model(model_class_for(hf_config), hf_config, self.num_stages)
        tied = bool(getattr(hf_config, "tie_word_embeddings", False))
        self.stage = pipeline_stage(
            self.world.rank, hf_config.num_hidden_layers, self.num_stages, self.config.num_shard, tied
        )
        return super().load()

    def build_model(self, model_cls: type, dtype: torch.dtype, linear: object) -> torch.nn.Module:
        return build_stage_model(model_cls, self.hf_config, self.stage, dtype, self.device, linear)

    def weight_select(self, select: Any) -> Any:
        return stage_selector(self.stage, select)

    def capabilities(self) -> RunnerCapabilities:
        return dataclasses.replace(
            super().capabilities(), draft_verification=False, lora_runtime_loading=False, async_steps=False
        )

    def kv_cache_spec(self) -> KVCacheSpec:
        """What the engine sizes the cache by: the layers of the stage that holds the most (the first), so
        that the one block count it picks fits every stage (each holds only its own layers)."""
        spec = super().kv_cache_spec()
        most = len(split_layers(spec.num_layers, self.num_stages)[0])
        return dataclasses.replace(spec, num_layers=most)

    def kv_layers(self) -> range:
        return self.stage.layers

    def initialize_cache(self, num_blocks: int) -> None:
        spec = dataclasses.replace(super().kv_cache_spec(), num_layers=len(self.stage.layers))
        cache = self.backend.create_kv_cache(spec, num_blocks)
        self.kv_cache = StageKVCache(cache, self.stage.layers.start)

    # -- one step ---------------------------------------------------------------------------------------
    @torch.inference_mode()
    def execute(self, batch: ScheduledBatch) -> StepOutput:
        stage, links = self.stage, self.links
        if not batch.sequences:
            return StepOutput(request_ids=[], token_ids=[], logprobs=[])
        self.backend.begin_step(batch.num_tokens)
        dtype, width = to_torch_dtype(self.dtype), self.hf_config.hidden_size
        finals, sending = [], []
        for part in split_micro_batches(batch, self.num_micro_batches):
            seqs = part.batch.sequences
            positions = build_positions(seqs, self.device)  # [T_m]
            meta = build_attention_metadata(seqs, self.config.block_size, self.device)
            self.attention.prepare(meta)
            ctx = AttentionContext(self.attention, self.kv_cache, meta)
            if stage.is_first:
                ids = to_device([t for s in seqs for t in s.token_ids], torch.int64, self.device)
                hidden, residual = self.model.embed(ids), None  # [T_m, H]
            else:
                received = links.receive_activations((2, part.num_tokens, width), dtype, stage.previous_rank)
                hidden, residual = received[0], received[1]
            hidden, residual = stage_forward(self.model, stage, hidden, residual, positions, ctx)
            if stage.is_last:
                finals.append(self.model.final_norm(hidden, residual))
            else:
                both = torch.stack((hidden, residual))  # [2, T_m, H], kept until sent
                sending.append((links.send_activations(both, stage.next_rank), both))
        for work, _ in sending:
            work.wait()
        output = StepOutput(request_ids=[], token_ids=[], logprobs=[])
        last = stage.rank_of(stage.num_stages - 1)
        if stage.is_last:
            output = self.step_output(batch, torch.cat(finals))  # [T, H] in batch order
            if stage.tp_rank == 0:
                links.send_output(output, 0)
        elif self.world.rank == 0:
            output = links.receive_output(last)
        return output
