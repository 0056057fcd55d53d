"""The torch model runner every torch backend shares: core's models on the backend's kernels."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import torch

from tgi.core.dtypes import to_torch_dtype
from tgi.core.interfaces import (
    Collective,
    KVCacheSpec,
    ModelInfo,
    ModelRunner,
    RunnerCapabilities,
    RunnerConstraints,
    UnsupportedError,
)
from tgi.core.interfaces.batch import ScheduledBatch, ScheduledSequence, StepOutput
from tgi.core.interfaces.runner import StepHandle
from tgi.core.loading import iter_weights, load_config
from tgi.core.loading.block_weights import iter_block_weights, stored_block_formats
from tgi.core.models.context import AttentionContext, build_attention_metadata, build_positions, image_spans
from tgi.core.models.registry import attention_layer_specs, kv_cache_spec, model_class_for
from tgi.core.quant.kv_scales import KVScales
from tgi.core.quant.quantized_loading import QuantizedLoading
from tgi.core.tokenization import config_eos_token_ids
from tgi.core.torch.dense_free_loading import (
    check_dense_free_linears,
    dense_free_weights,
    skipping,
    with_placeholders,
)
from tgi.core.torch.host_transfer import HostCopy, start_to_host, to_device
from tgi.core.torch.pending_tokens import LastSampled
from tgi.core.torch.pooling import pooled_vectors, token_states
from tgi.core.torch.prompt_logprobs import add_prompt_logprobs, prompt_positions

if TYPE_CHECKING:
    from tgi.core.config import EngineConfig
    from tgi.core.loading.source import ModelSource
    from tgi.core.torch.backend import TorchBackend

log = logging.getLogger(__name__)


class TorchModelRunner(ModelRunner):
    """Loads a model from core's definitions onto a `TorchBackend` and runs scheduled batches."""

    def __init__(
        self, backend: TorchBackend, source: ModelSource, config: EngineConfig, collective: Collective
    ):
        self.backend = backend
        self.source = source
        self.config = config
        self.collective = collective
        self.dtype = config.dtype or backend.default_dtype()
        self.device = backend.torch_device()
        self.attention = backend.attention()
        self.sampler = backend.sampler()
        self.kv_cache = None
        self.kv_scales = KVScales()
        self.model = None
        self.medusa = None  # Medusa heads, when the checkpoint has them and --speculate asks
        self.lora = None  # the LoRA adapters' state (`tgi.core.lora.LoRAModel`), when --lora-adapters asks
        self.hf_config = None
        self.images = None  # `ImageEmbeddings`, when the model has a vision tower
        # each request's positions, when the model's are not one per token (M-RoPE: `RequestPositions`)
        self.request_positions = None
        self.last_sampled = LastSampled()  # the last step's tokens on the device (overlapped steps)
        # the model's image tokens attend to each other both ways at prefill (Gemma 3): each prefill chunk's
        # image spans go to the attention, and the scheduler keeps an image in one chunk
        self.bidirectional_images = False

    # -- lifecycle --------------------------------------------------------------------------------------
    def load(self) -> ModelInfo:
        self.backend.check_dtype(self.dtype)
        self.hf_config = load_config(self.source)
        # refuses unsupported architectures, naming the supported
        model_cls = model_class_for(self.hf_config, pooling=self.config.pooling is not None)
        tp_size = self.collective.world_size
        for layer in attention_layer_specs(self.hf_config, tp_size):
            self.attention.check(layer, self.config.block_size, self.dtype)
        self.bidirectional_images = bool(getattr(model_cls, "bidirectional_images", False))
        if self.bidirectional_images and not self.attention.caps().bidirectional_spans:
            raise UnsupportedError(
                f"{model_cls.architecture}: its image tokens attend to each other both ways at prefill, which "
                f"attention '{self.attention.name}' cannot do (the CPU backend's prefill can)"
            )
        linear = select = None
        if tp_size > 1:  # this rank's shard: parallel layers, and only its slices read from the checkpoint
            from tgi.core.parallel.layers import ParallelLinearFactory, weight_selector

            linear = ParallelLinearFactory.for_config(self.collective, self.hf_config)
        dtype = to_torch_dtype(self.dtype)
        self.model = self.build_model(model_cls, dtype, linear)
        if tp_size > 1:
            select = weight_selector(self.model)
        select = self.weight_select(select)
        quant = QuantizedLoading(self.backend, self.hf_config, self.config.quantize, self.source, self.dtype)
        quant.check(self.model, tp_size)  # refuses what this backend cannot compute, before reading weights
        dequantize = self.backend.gguf_dequantizer(self.dtype) if self.source.format == "gguf" else None
        qtypes = self.backend.block_weight_types(self.dtype)
        blocks = bool(qtypes) and tp_size == 1 and hasattr(self.model, "attach_quantized_weights")
        dense_free = {}  # weights loaded without their dense copy (their blocks' kernel takes every row count)
        if blocks and not self.config.quantize:
            standalone = self.backend.standalone_block_types(self.dtype)
            if standalone:
                stored = stored_block_formats(self.source)
                dense_free = dense_free_weights(self.model, stored, standalone)
        self.kv_scales = KVScales()  # the checkpoint's float8 KV cache scales, kept for the cache's spec
        select_kv = self.kv_scales.selecting(skipping(select, dense_free))
        weights = self.kv_scales.take(
            iter_weights(self.source, self.hf_config, select=select_kv, dequantize=dequantize)
        )
        self.model.load_weights(
            quant.split_checkpoint(self.model, with_placeholders(weights, dense_free, select))
        )
        quant.attach_weights(self.model)
        if blocks:
            self.model.attach_quantized_weights(iter_block_weights(self.source, self.hf_config, qtypes))
        self.model.eval()
        self.backend.prepare_model(self.model)
        quantization = quant.attach_kernels(self.model)
        check_dense_free_linears(self.model)
        self.lora = None  # LoRA adapters (--lora-adapters): deltas added on top of the prepared linears
        if self.config.lora_adapters:
            from tgi.core.lora import load_lora

            self.lora = load_lora(
                self.model, self.config.lora_adapters, self.backend.lora_ops(), self.config.max_lora_rank
            )
        self.medusa = None
        if self.source.speculator and self.config.speculate:
            from tgi.core.speculative.medusa import MedusaHeads

            self.medusa = MedusaHeads(
                self.source.speculator,
                self.hf_config.hidden_size,
                self.model.compute_logits,
                dtype,
                self.device,
            )
        self.images = None
        if getattr(self.model, "takes_images", False):
            from tgi.core.torch.image_embeddings import ImageEmbeddings

            self.images = ImageEmbeddings(
                self.model.encode_images, self.device, getattr(self.model, "image_extras", None)
            )
        # a model whose positions a request's prompt and images decide (M-RoPE) says so by making them
        make_positions = getattr(self.model, "request_positions", None)
        self.request_positions = make_positions() if make_positions is not None else None
        text_config = getattr(self.model, "text_config", self.hf_config)  # a vision model's decoder's
        architecture = (self.hf_config.architectures or [type(self.model).__name__])[0]
        path = getattr(self.model, "implementation_note", None)  # e.g. "transformers fallback"
        return ModelInfo(
            architecture=f"{architecture} ({path})" if path else architecture,
            vocab_size=text_config.vocab_size,
            max_position_embeddings=getattr(text_config, "max_position_embeddings", 4096),
            eos_token_ids=tuple(
                dict.fromkeys(config_eos_token_ids(self.hf_config) + config_eos_token_ids(text_config))
            ),
            dtype=self.dtype,
            num_parameters=self._num_parameters(),
            lora_adapters=self.lora.names if self.lora is not None else (),
            quantization=quantization,
        )

    def _num_parameters(self) -> int:
        """The model's parameters; quantized linears keep their dense weight's shape on the meta device:
        counted too, but not a head tied to the embeddings (counted with them)."""
        tied = (
            getattr(self.model, "lm_head", None)
            if getattr(self.model, "tie_word_embeddings", False)
            else None
        )
        dropped = (
            m.weight.numel()
            for m in self.model.modules()
            if m.__dict__.get("quant_device") is not None and m is not tied
        )
        return sum(p.numel() for p in self.model.parameters()) + sum(dropped)

    def build_model(self, model_cls: type, dtype: torch.dtype, linear: object) -> torch.nn.Module:
        """The model, its parameters empty on this runner's device (a pipeline stage builds its part)."""
        return model_cls(self.hf_config, dtype=dtype, device=self.device, linear=linear)

    def weight_select(self, select: object) -> object:
        """What this runner reads of the checkpoint: `select` (None: everything) as tensor parallelism
        narrows it; a pipeline stage narrows it further to its layers."""
        return select

    def constraints(self) -> RunnerConstraints:
        # a pooled prompt comes whole: its pooling reads every token's hidden state (and an encoder's
        # tokens attend both ways)
        pooling = self.config.pooling is not None
        return RunnerConstraints(atomic_images=self.bidirectional_images, chunked_prefill=not pooling)

    def capabilities(self) -> RunnerCapabilities:
        return RunnerCapabilities(
            token_masks=self.sampler.supports_token_masks,
            unsupported_sampling=self.sampler.unsupported_sampling,
            draft_verification=True,
            medusa_heads=self.medusa.num_heads if self.medusa is not None else 0,
            prompt_top_logprobs=True,
            lora_runtime_loading=hasattr(self.model, "checkpoint_target"),  # core's native models
            # the backend switched to its batch-invariant kernels before this runner took them
            batch_invariant=getattr(self.backend, "batch_invariant", False),
            image_inputs=self.images is not None,  # the model has a vision tower
            pooling=self.collective.world_size == 1,  # `StepOutput.pooled`; not yet over shards or stages
            token_embeddings=self.collective.world_size == 1,  # `StepOutput.token_embeddings`, likewise
            # the backend's device runs queued work while the host goes on; one process (no rank to tell); a
            # subclass with its own `execute` (static shapes) would be bypassed by `execute_async`
            async_steps=self.backend.overlaps_steps
            and self.collective.world_size == 1
            and type(self).execute is TorchModelRunner.execute,
        )

    def check_lora_adapter(self, name: str, path: str) -> None:
        """Read the adapter and check it fits this model, without serving it (`AdapterError` says why not)."""
        from tgi.core.lora import check_lora

        check_lora(self.model, name, path, self.config.max_lora_rank)

    def load_lora_adapter(self, name: str, path: str) -> tuple[str, ...]:
        from tgi.core.lora import load_lora, read_adapter

        if self.lora is None:
            self.lora = load_lora(
                self.model, [(name, path)], self.backend.lora_ops(), self.config.max_lora_rank
            )
        else:
            self.lora.add(read_adapter(name, path, self.model, self.config.max_lora_rank))
        return self.lora.names

    def unload_lora_adapter(self, name: str) -> tuple[str, ...]:
        if self.lora is None or name not in self.lora.slots:
            raise KeyError(f"LoRA adapter '{name}' is not loaded")
        self.lora.remove(name)
        return self.lora.names

    def kv_cache_spec(self) -> KVCacheSpec:
        spec = kv_cache_spec(self.hf_config, self.config.block_size, self.dtype, self.collective.world_size)
        return self.kv_scales.apply(spec, self.config.kv_cache_dtype, self.kv_layers())

    def kv_layers(self) -> range:
        """The checkpoint's indices of the layers this runner's KV cache holds (a pipeline stage: its own)."""
        return range(len(attention_layer_specs(self.hf_config, self.collective.world_size)))

    def initialize_cache(self, num_blocks: int) -> None:
        self.kv_cache = self.backend.create_kv_cache(self.kv_cache_spec(), num_blocks)

    def shutdown(self) -> None:
        """Drop the weights (with the backend's packed copies and kernels attached to the model), the KV
        cache, the LoRA adapters and the Medusa heads; the runner cannot execute again. Idempotent."""
        self.model = self.kv_cache = self.lora = self.medusa = self.images = self.request_positions = None

    def warmup(self, max_batch_tokens: int, max_num_seqs: int) -> None:
        """One prefill of `max_batch_tokens` tokens (at most the backend's `warmup_prefill_tokens`) and one
        decode of `max_num_seqs` sequences (at most its `warmup_decode_seqs`), written into blocks that no
        request owns yet (the cache is empty before serving)."""
        from tgi.core.sampling_params import SamplingParams

        bs, blocks = self.config.block_size, self.kv_cache.num_blocks
        n = min(max_batch_tokens, blocks * bs, self.backend.warmup_prefill_tokens or max_batch_tokens)
        params, pool = SamplingParams(), self.config.pooling is not None
        blocks_n = list(range(-(-n // bs)))
        prefill = ScheduledSequence(
            "warmup", [0] * n, 0, blocks_n, True, not pool, params, 0, n, [0] * n, pool=pool
        )
        self.execute(ScheduledBatch(0, [prefill], 1))
        decodes = [
            ScheduledSequence(f"w{i}", [0], 0, [i % blocks], pool, not pool, params, 0, 1, [0], pool=pool)
            for i in range(min(max_num_seqs, blocks, self.backend.warmup_decode_seqs or max_num_seqs))
        ]
        self.execute(ScheduledBatch(0, decodes, len(decodes) if pool else 0))  # pooled: prefills of 1
        self.backend.synchronize()

    # -- one step ---------------------------------------------------------------------------------------
    def execute(self, batch: ScheduledBatch) -> StepOutput:
        return self.execute_async(batch).result()

    @torch.inference_mode()
    def execute_async(self, batch: ScheduledBatch) -> StepHandle:
        seqs, device = batch.sequences, self.device
        input_ids = to_device([t for s in seqs for t in s.token_ids], torch.int64, device)
        self.last_sampled.fill(seqs, input_ids)  # decodes fed the token the step before left on the device
        self.backend.begin_step(input_ids.numel())
        if self.request_positions is None:
            positions = build_positions(seqs, device)  # [T]
        else:  # [T], or [3, T] when a chunk feeds image placeholders
            self.request_positions.drop(batch.freed_request_ids)
            positions = self.request_positions.build(seqs, device)
        meta = build_attention_metadata(seqs, self.config.block_size, device)
        if self.bidirectional_images:
            meta.prefill_bidirectional_spans = image_spans(seqs)
        self.attention.prepare(meta)
        if self.lora is not None:
            self.lora.begin_step(seqs, device)
        embeds = None
        encoder_before = 0.0 if self.images is None else self.images.encoder_seconds
        if self.images is not None:
            self.images.drop(batch.freed_request_ids)
            if any(s.images for s in seqs):
                embeds = self.model.embed(input_ids)
                if not self.images.place(seqs, embeds):
                    embeds = None  # no placeholder in this step's chunks
        ctx = AttentionContext(self.attention, self.kv_cache, meta)
        if embeds is None:
            hidden = self.model(input_ids, positions, ctx)  # [T, H]
        else:
            hidden = self.model(input_ids, positions, ctx, inputs_embeds=embeds)
        if self.lora is not None:
            self.lora.end_step()  # the logits head and Medusa heads are not adapted
        handle = self.start_output(batch, hidden)
        if self.images is not None:
            handle.output.encoder_seconds = self.images.encoder_seconds - encoder_before
        return handle

    def step_output(self, batch: ScheduledBatch, hidden: torch.Tensor) -> StepOutput:
        """The step's sampled tokens (and prompt logprobs) from the final hidden states [T, H] of all its
        tokens, in batch order."""
        return self.start_output(batch, hidden).result()

    def start_output(self, batch: ScheduledBatch, hidden: torch.Tensor) -> SampledStep:
        """`step_output`, with the sampled tokens' copy back queued and not waited for."""
        seqs, device = batch.sequences, self.device
        ends, starts, end = [], [], 0
        for s in seqs:
            starts.append(end)
            end += len(s.token_ids)
            ends.append(end)
        sampled = [i for i, s in enumerate(seqs) if s.sample]
        output = StepOutput(request_ids=[], token_ids=[], logprobs=[])
        if self.config.pooling is not None:
            output.pooled = pooled_vectors(hidden, seqs, starts, ends, self.config.pooling, self.model)
            output.token_embeddings = token_states(hidden, seqs, starts, ends)
        if sampled:
            # one row per sampled position: the last, or the last num_draft_tokens + 1 of a verify chunk
            rows, positions = [], []
            for i in sampled:
                expanded = seqs[i].draft_rows()
                rows += expanded
                positions += range(ends[i] - len(expanded), ends[i])
            last = to_device(positions, torch.int64, device)
            picked = hidden.index_select(0, last)
            logits = self.model.compute_logits(picked)  # [N, V] float32
            if self.medusa is not None:  # every rank: the heads' projection may gather over ranks
                guesses = self.medusa(picked).argmax(dim=-1)  # [N, heads]
        # tensor parallel: every rank computes the (all-gathered) logits, rank 0 alone samples
        if sampled and self.collective.rank == 0:
            masks = batch.token_masks
            if masks is not None:
                masks = masks.at_positions([seqs[i] for i in sampled])
            result = self.sampler.sample(logits, rows, masks)
            output.request_ids = [s.request_id for s in rows]
            self.last_sampled.remember(output.request_ids, result.token_ids)
            # everything the host reads of the step in one copy back: the step's only wait for the device
            fetched = [result.token_ids, result.logprobs]
            if result.top_token_ids is not None:
                fetched += [result.top_token_ids, result.top_logprobs]
            if self.medusa is not None:
                fetched.append(guesses)
            copy, top = start_to_host(*fetched), result.top_token_ids is not None
        else:
            copy, top = start_to_host(), False
        for i, s in enumerate(seqs):
            if s.want_prompt_logprobs and s.is_prefill:
                self._prompt_logprobs(output, hidden[starts[i] : ends[i]], s)
        return SampledStep(output, copy, top=top, guesses=self.medusa is not None)

    def _prompt_logprobs(self, output: StepOutput, hidden: torch.Tensor, seq: ScheduledSequence) -> None:
        """`output`'s prompt logprobs of `seq` (ranks and top tokens when asked; see StepOutput), from the
        hidden states of its chunk (position p predicts token p+1)."""
        first, last = prompt_positions(seq)
        logits = self.model.compute_logits(hidden[: last - first + 1]) if last >= first else None
        if self.collective.rank == 0:
            add_prompt_logprobs(output, seq, logits)


class SampledStep(StepHandle):
    """A step whose sampled tokens are on their way back to the host: `result()` waits for the copy and
    fills `output` with them."""

    def __init__(self, output: StepOutput, copy: HostCopy, top: bool, guesses: bool) -> None:
        self.output, self._copy, self._top, self._guesses = output, copy, top, guesses

    def result(self) -> StepOutput:
        host = self._copy.wait()
        if host:
            output = self.output
            output.token_ids, output.logprobs = host[0], host[1]
            if self._top:
                output.top_token_ids, output.top_logprobs = host[2], host[3]
            if self._guesses:
                output.guesses = host[-1]
        return self.output
