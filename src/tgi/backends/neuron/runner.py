"""The Neuron runner: a model compiled for a static batch of slots, driven by core's scheduler.

The constraints it declares (`constraints()`) make the scheduler build only what the compiled model can
run: at most `batch_size` sequences, whole prompts (no chunked prefill: a slot's cache is filled by one
context encoding), prefill steps and decode steps apart (no mixed batches), and a context of at most
`sequence_length` tokens (the model's reported context length, so the engine's limits follow it).

A prefill step encodes each new sequence into a free slot, one slot at a time, while the other slots keep
their caches; a decode step runs one token for every sequence of the step, each in its slot. A sequence
finished, cancelled or preempted (its id in `freed_request_ids`) gives its slot back before the step runs;
a preempted one is encoded again, whole, into whatever slot is free when it is readmitted.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from tgi.backends.neuron.device import AUTO_CAST_TYPES, CompileSpec, NeuronDevice, NeuronModel
from tgi.backends.neuron.slots import SlotTable
from tgi.core.config import ConfigError
from tgi.core.interfaces import (
    KVCacheSpec,
    MemoryInfo,
    ModelInfo,
    ModelRunner,
    RunnerCapabilities,
    RunnerConstraints,
    UnsupportedError,
)
from tgi.core.interfaces.batch import ScheduledBatch, StepOutput
from tgi.core.loading import load_config
from tgi.core.models.registry import kv_cache_spec
from tgi.core.sampling.sampler import TorchSampler
from tgi.core.tokenization import config_eos_token_ids

if TYPE_CHECKING:
    from tgi.core.config import EngineConfig
    from tgi.core.loading.source import ModelSource

log = logging.getLogger(__name__)

#: compiled context length when neither --max-total-tokens nor a pre-exported model sets one
DEFAULT_SEQUENCE_LENGTH = 4096
_DTYPES = {v: k for k, v in AUTO_CAST_TYPES.items()}


class NeuronModelRunner(ModelRunner):
    """Compiles (`--max-num-seqs` slots of `--max-total-tokens`, over `num_cores` NeuronCores) or loads a
    pre-exported model, and runs scheduled batches on it (module docstring)."""

    def __init__(
        self, device: NeuronDevice, source: ModelSource, config: EngineConfig, num_cores: int
    ) -> None:
        self.device, self.source, self.config, self.num_cores = device, source, config, num_cores
        self.model: NeuronModel | None = None
        self.slots: SlotTable | None = None
        self.sampler = TorchSampler()
        self.hf_config = None

    def compile_spec(self) -> tuple[CompileSpec, bool]:
        """The spec to run with, and whether the checkpoint is pre-exported (config.json's `neuron`)."""
        exported = CompileSpec.from_config(Path(self.source.path) / "config.json")
        if exported is not None:
            if self.num_cores not in (1, exported.num_cores):
                raise ConfigError(
                    f"--num-shard {self.num_cores}: this model was exported for {exported.num_cores} NeuronCores"
                )
            return exported, True
        dtype = self.config.dtype or "bfloat16"
        length = self.config.max_total_tokens or min(
            getattr(self.hf_config, "max_position_embeddings", DEFAULT_SEQUENCE_LENGTH),
            DEFAULT_SEQUENCE_LENGTH,
        )
        return CompileSpec(self.config.max_num_seqs, length, self.num_cores, AUTO_CAST_TYPES[dtype]), False

    def load(self) -> ModelInfo:
        if self.config.lora_adapters:
            raise ConfigError("--lora-adapters: the neuron backend's runner does not serve LoRA adapters")
        self.hf_config = load_config(self.source)
        spec, exported = self.compile_spec()
        if exported:
            log.info("loading the pre-exported Neuron model %s (%s)", self.source.path, spec)
            self.model = self.device.load(str(self.source.path), spec)
        else:
            log.info("compiling %s for NeuronCores: %s", self.source.path, spec)
            self.model = self.device.export(str(self.source.path), spec)
        dtype = _DTYPES[spec.auto_cast_type]
        if self.config.dtype and self.config.dtype != dtype:  # never run another dtype than was asked
            raise ConfigError(
                f"dtype {self.config.dtype} (--dtype, or the backend's default): this model was compiled "
                f"for {dtype}; pass --dtype {dtype}"
            )
        self.slots = SlotTable(spec.batch_size)
        architecture = (self.hf_config.architectures or ["?"])[0]
        return ModelInfo(
            architecture=f"{architecture} (Neuron: {spec.batch_size} slots of {spec.sequence_length} tokens)",
            vocab_size=self.hf_config.vocab_size,
            max_position_embeddings=spec.sequence_length,  # the compiled context: the engine's limit
            eos_token_ids=config_eos_token_ids(self.hf_config),
            dtype=dtype,
            num_parameters=self.model.num_parameters,
        )

    @property
    def spec(self) -> CompileSpec:
        return self.model.spec

    def constraints(self) -> RunnerConstraints:
        return RunnerConstraints(
            max_batch_size=self.spec.batch_size, static_batch_size=True, chunked_prefill=False,
            mixed_batches=False,
        )  # fmt: skip

    def capabilities(self) -> RunnerCapabilities:
        # prompt logprobs: the compiled context encoding returns the last position's logits only
        return RunnerCapabilities(token_masks=self.sampler.supports_token_masks, prompt_logprobs=False)

    def kv_cache_spec(self) -> KVCacheSpec:
        """The engine's block bookkeeping (the keys/values themselves live in the compiled model)."""
        return kv_cache_spec(self.hf_config, self.config.block_size, _DTYPES[self.spec.auto_cast_type], 1)

    def memory_info(self) -> MemoryInfo:
        """Exactly what the compiled model holds: `batch_size` slots of `sequence_length` tokens."""
        bs = self.config.block_size
        nbytes = (
            self.kv_cache_spec().bytes_per_block * self.spec.batch_size * -(-self.spec.sequence_length // bs)
        )
        return MemoryInfo(total=nbytes, free=nbytes)

    def initialize_cache(self, num_blocks: int) -> None:
        """Nothing to allocate: the compiled model holds its slots' caches."""

    @torch.inference_mode()
    def warmup(self, max_batch_tokens: int, max_num_seqs: int) -> None:
        """Load the graphs onto the cores with one prefill and one decode on slot 0 (no request holds it:
        the next prefill into it replaces what this left)."""
        self.model.prefill(torch.zeros(1, 1, dtype=torch.int64), 0)
        self.model.decode(
            torch.zeros(1, 1, dtype=torch.int64),
            torch.ones(1, dtype=torch.int64),
            torch.zeros(1, dtype=torch.int64),
        )

    @torch.inference_mode()
    def execute(self, batch: ScheduledBatch) -> StepOutput:
        for request_id in batch.freed_request_ids:
            self.slots.release(request_id)
        seqs = batch.sequences
        if any(s.want_prompt_logprobs for s in seqs):  # the engine refuses them (capabilities)
            raise UnsupportedError("the neuron backend cannot return prompt logprobs")
        if batch.num_prefill_seqs:
            if batch.num_prefill_seqs != len(seqs):
                raise RuntimeError("a mixed step reached the neuron runner (its constraints forbid them)")
            # one context encoding per sequence into its slot: a free one, or the one it holds (a prefill
            # is always a whole prompt, so a request prefilled again is encoded again from position 0)
            logits = torch.cat(
                [self.model.prefill(self._tokens(s), self._prefill_slot(s.request_id)) for s in seqs]
            )
        else:
            ids = torch.tensor([[s.token_ids[0]] for s in seqs], dtype=torch.int64)
            positions = torch.tensor([s.start_pos for s in seqs], dtype=torch.int64)
            slots = torch.tensor([self.slots.slot_of(s.request_id) for s in seqs], dtype=torch.int64)
            logits = self.model.decode(ids, positions, slots)
        sampled = [i for i, s in enumerate(seqs) if s.sample]
        output = StepOutput(request_ids=[], token_ids=[], logprobs=[])
        if sampled:
            rows = [seqs[i] for i in sampled]
            result = self.sampler.sample(logits[sampled], rows, batch.token_masks)
            output.request_ids = [s.request_id for s in rows]
            output.token_ids = result.token_ids.tolist()
            output.logprobs = result.logprobs.tolist()
            if result.top_token_ids is not None:
                output.top_token_ids = result.top_token_ids.tolist()
                output.top_logprobs = result.top_logprobs.tolist()
        return output

    @staticmethod
    def _tokens(seq) -> torch.Tensor:
        return torch.tensor([list(seq.token_ids)], dtype=torch.int64)

    def _prefill_slot(self, request_id: str) -> int:
        held = self.slots.get(request_id)
        return held if held is not None else self.slots.assign(request_id)

    def shutdown(self) -> None:
        self.model = None
