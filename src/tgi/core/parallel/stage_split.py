"""Which layers each pipeline stage holds, and which ranks make up a stage.

A model of L decoder layers runs as P stages of contiguous layers, balanced by layer count: every stage
holds L // P layers and the first L % P stages one more (the last stage also runs the final norm and the
output head over the sampled rows, so an extra layer goes to the others first). The first stage holds the
input embedding, the last the final norm and the output head; with tied embeddings the last stage keeps the
embedding table as its head's weight (read from the checkpoint's embedding tensor), as vLLM's last rank does.

With tensor parallelism inside each stage (`--num-shard T`), global rank r is shard `r % T` of stage
`r // T`: a stage's shards are consecutive ranks, and rank 0 (the server's process) is shard 0 of stage 0.
Plain Python (no framework).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


def split_layers(num_layers: int, num_stages: int) -> list[range]:
    """The contiguous layer ranges of `num_stages` stages over `num_layers` layers, balanced by count (the
    first `num_layers % num_stages` stages hold one more). `ValueError` when a stage would hold none."""
    if num_stages < 1:
        raise ValueError(f"pipeline stages must be >= 1, got {num_stages}")
    if num_layers < num_stages:
        raise ValueError(
            f"the model has {num_layers} decoder layers, fewer than {num_stages} pipeline stages: every "
            "stage must hold at least one"
        )
    base, extra = divmod(num_layers, num_stages)
    ranges, start = [], 0
    for stage in range(num_stages):
        end = start + base + (1 if stage < extra else 0)
        ranges.append(range(start, end))
        start = end
    return ranges


@dataclass(frozen=True)
class PipelineStage:
    """One rank's place in a pipeline of `num_stages` stages, each `tp_size` tensor-parallel shards wide."""

    index: int  # this rank's stage, 0 .. num_stages - 1
    num_stages: int
    layers: range  # the decoder layers it holds (global indices)
    tp_rank: int  # its shard within the stage, 0 .. tp_size - 1
    tp_size: int
    tied_embeddings: bool  # the checkpoint ties the output head to the input embedding

    @property
    def is_first(self) -> bool:
        return self.index == 0

    @property
    def is_last(self) -> bool:
        return self.index == self.num_stages - 1

    @property
    def holds_embedding(self) -> bool:
        """The input embedding table: the first stage's, and the last's as its head's weight when tied."""
        return self.is_first or (self.is_last and self.tied_embeddings)

    def rank_of(self, stage: int) -> int:
        """The global rank of this rank's peer (the same shard) in `stage`."""
        return stage * self.tp_size + self.tp_rank

    @property
    def previous_rank(self) -> int | None:
        return None if self.is_first else self.rank_of(self.index - 1)

    @property
    def next_rank(self) -> int | None:
        return None if self.is_last else self.rank_of(self.index + 1)


def pipeline_stage(
    rank: int, num_layers: int, num_stages: int, tp_size: int = 1, tied_embeddings: bool = False
) -> PipelineStage:
    """Global rank `rank`'s stage in a group of `num_stages * tp_size` ranks."""
    world = num_stages * tp_size
    if not 0 <= rank < world:
        raise ValueError(f"rank {rank} is outside a group of {world} ranks")
    index = rank // tp_size
    return PipelineStage(
        index=index,
        num_stages=num_stages,
        layers=split_layers(num_layers, num_stages)[index],
        tp_rank=rank % tp_size,
        tp_size=tp_size,
        tied_embeddings=tied_embeddings,
    )


def pipeline_config_problem(config: Any) -> str | None:
    """Why an `EngineConfig` with `pipeline_parallel_size > 1` cannot run, naming the setting, or None.
    These features need all of the model on the rank that uses them, or the draft's rows on every stage."""
    pp = f"--pipeline-parallel-size {config.pipeline_parallel_size}"
    if config.speculate or config.speculative_model:
        return (
            f"{pp} with --speculate / --speculative-model: speculation is not served across pipeline stages"
        )
    if config.lora_adapters:
        return f"{pp} with --lora-adapters: LoRA adapters are not served across pipeline stages"
    if config.quantize is not None:
        return f"{pp} with --quantize {config.quantize}: pipeline stages load dense weights only"
    return None


#: checkpoint name prefixes of the parts a stage holds beside its layers
_EMBEDDING = "model.embed_tokens."
_LAST_STAGE = ("model.norm.", "lm_head.")
_LAYER = "model.layers."


def stage_holds(stage: PipelineStage, name: str) -> bool:
    """Whether `stage` holds checkpoint tensor `name` (Hugging Face's names of a Llama-family decoder)."""
    if name.startswith(_LAYER):
        return int(name[len(_LAYER) :].split(".", 1)[0]) in stage.layers
    if name.startswith(_EMBEDDING):
        return stage.holds_embedding
    if name.startswith(_LAST_STAGE):
        return stage.is_last
    return True  # anything else (rotary tables the model skips) is for the model to judge
