"""The transformers fallback: a causal LM with no native implementation runs transformers' own modules,
with its attention routed to the backend's paged attention through transformers' attention-interface
registry (`AttentionInterface.register("tgi_paged", ...)`), so it still batches continuously over the paged
KV cache like a native model.

How a step runs: the step's tokens go in as one row ([1, T], per-token `position_ids`, no attention mask,
no transformers cache); each attention layer's call lands in `_paged_attention_forward`, which writes the
layer's keys/values at the step's slots and attends through the backend (`paged_attention`), reading the
`AttentionContext` of the step from a context variable. The whole causal-LM forward runs, logits included,
so whatever the model does after its last layer (soft-caps, scales) is kept: `forward` returns the logits
[T, vocab] and `compute_logits` only casts them. That costs a vocabulary-sized product for every token of a
prefill, where native models compute it for the sampled tokens only.

Refused, with the reason: architectures transformers has no causal LM for, encoder-decoders, layers other
than (sliding-window) attention (linear attention, state-space: their state is not in the KV cache), models
whose attention does not go through the attention interface (`_supports_attention_backend`), checkpoints whose
tensor names need transformers' conversions (an unexpected name is named), and tensor parallelism.

A checkpoint with code of its own (`auto_map`, a `model_type` transformers does not know) runs here with
`--trust-remote-code` only: `load_config` then loads its config class and registers its causal-LM class as
transformers' causal LM for that config, which this module then builds like any other.
"""

from __future__ import annotations

import contextvars
import copy
import logging
import re
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from tgi.core.dtypes import to_torch_dtype
from tgi.core.interfaces.types import AttentionLayerSpec, KVCacheSpec
from tgi.core.models.attention import paged_attention
from tgi.core.models.context import AttentionContext
from tgi.core.models.layers import LinearFactory
from tgi.core.models.registry import UnsupportedModelError

log = logging.getLogger(__name__)

ATTENTION_NAME = "tgi_paged"
_STEP: contextvars.ContextVar[AttentionContext | None] = contextvars.ContextVar("tgi_step", default=None)


def _paged_attention_forward(
    module: nn.Module,
    query: torch.Tensor,  # [1, H, T, D]
    key: torch.Tensor,  # [1, Hkv, T, D]
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    sliding_window: int | None = None,
    softcap: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function signature; returns ([1, T, H, D], no weights)."""
    ctx = _STEP.get()
    if ctx is None:
        raise RuntimeError("the tgi_paged attention runs only inside TransformersCausalLM.forward")
    layer_idx = getattr(module, "layer_idx", None)
    if layer_idx is None:
        raise UnsupportedModelError(f"{type(module).__name__} does not say its layer index (layer_idx)")
    if query.shape[0] != 1:
        raise ValueError(f"the step's tokens come as one row, got a batch of {query.shape[0]}")
    q = query[0].transpose(0, 1).contiguous()  # [T, H, D]
    k = key[0].transpose(0, 1).contiguous()
    v = value[0].transpose(0, 1).contiguous()
    d = q.shape[-1]
    cache = ctx.kv_cache.spec
    if (k.shape[1], d) != (cache.num_kv_heads, cache.head_dim):
        raise UnsupportedModelError(
            f"{type(module).__name__} attends with {k.shape[1]} key/value heads of {d} dims, but its config "
            f"reads as {cache.num_kv_heads} of {cache.head_dim}: the transformers fallback cannot size its KV "
            "cache"
        )
    spec = AttentionLayerSpec(
        num_heads=q.shape[1],
        num_kv_heads=k.shape[1],
        head_dim=d,
        scale=d**-0.5 if scaling is None else float(scaling),
        sliding_window=sliding_window,
        softcap=softcap,
    )
    return paged_attention(q, k, v, ctx, int(layer_idx), spec).unsqueeze(0), None


def register_attention() -> None:
    """Make `attn_implementation="tgi_paged"` known to transformers (idempotent)."""
    from transformers import AttentionInterface

    AttentionInterface.register(ATTENTION_NAME, _paged_attention_forward)


#: model types of encoders whose transformers causal-LM class runs them as decoders only when the config says
#: `is_decoder` (a BERT-like checkpoint without it is an encoder, for embeddings or classification)
_ENCODER_TYPES = frozenset(
    {
        "bert", "bert-generation", "big_bird", "camembert", "data2vec-text", "electra", "ernie", "megatron-bert",
        "rembert", "roberta", "roberta-prelayernorm", "roc_bert", "roformer", "xlm-roberta", "xlm-roberta-xl",
        "xmod",
    }
)  # fmt: skip


def fallback_class(config: Any) -> type:
    """transformers' causal-LM class for `config`, or `UnsupportedModelError` with the reason the fallback
    cannot run it."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    name = (getattr(config, "architectures", None) or [f"model_type '{config.model_type}'"])[0]
    if getattr(config, "is_encoder_decoder", False):
        raise UnsupportedModelError(f"{name} is an encoder-decoder model: tgi serves decoder-only models")
    try:
        cls = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]
    except KeyError:
        raise UnsupportedModelError(
            f"unsupported model architecture {name}: no native implementation, and transformers has no "
            f"causal LM for {type(config).__name__}"
        ) from None
    if config.model_type in _ENCODER_TYPES and not getattr(config, "is_decoder", False):
        raise UnsupportedModelError(
            f"{name} is an encoder (every token attends to every other): transformers' {cls.__name__} would run "
            "it as a decoder, which it is not. Encoders are served for embeddings and scores by their own "
            "architectures (BertModel, RobertaModel, XLMRobertaModel and their *ForSequenceClassification)"
        )
    other = sorted(set(getattr(config, "layer_types", None) or []) - {"full_attention", "sliding_attention"})
    if other:
        raise UnsupportedModelError(
            f"{name} has layers of type {', '.join(other)}, whose state the paged KV cache does not hold"
        )
    if not getattr(cls, "_supports_attention_backend", False):
        raise UnsupportedModelError(
            f"{name} has no native implementation, and transformers' {cls.__name__} does not route its "
            "attention through the attention interface, so the transformers fallback cannot page it"
        )
    return cls


class TransformersCausalLM(nn.Module):
    """transformers' own model on tgi's paged attention (see the module docstring). The same interface as
    core's native models: `attention_layer_specs`, `load_weights`, `forward(input_ids, positions, ctx)`,
    `compute_logits`, `kv_cache_spec`."""

    architecture = "TransformersCausalLM"
    implementation_note = "transformers fallback"  # shown beside the architecture ("weights loaded: ...")

    @classmethod
    def attention_layer_specs(cls, config: Any, tp_size: int = 1) -> list[AttentionLayerSpec]:
        fallback_class(config)
        if tp_size != 1:
            raise ValueError(
                "the transformers fallback runs unsharded (tensor parallelism needs a native model)"
            )
        heads = config.num_attention_heads
        kv_heads = cls.num_kv_heads(config)
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
        window = getattr(config, "sliding_window", None)
        return [
            AttentionLayerSpec(heads, kv_heads, head_dim, head_dim**-0.5, window, None)
            for _ in range(config.num_hidden_layers)
        ]

    @classmethod
    def num_kv_heads(cls, config: Any) -> int:
        """The key/value heads, under the names configs give them (checked against the model's own at
        every step)."""
        for name in ("num_key_value_heads", "num_kv_heads", "n_head_kv"):
            if getattr(config, name, None):
                return int(getattr(config, name))
        return 1 if getattr(config, "multi_query", False) else config.num_attention_heads

    @classmethod
    def sharded_sizes(cls, config: Any) -> dict[str, int]:
        return {}

    def __init__(
        self,
        config: Any,
        *,
        dtype: torch.dtype | str = torch.float32,
        device: torch.device | str = "cpu",
        linear: LinearFactory | None = None,
    ) -> None:
        super().__init__()
        from transformers import AutoModelForCausalLM
        from transformers.initialization import no_init_weights

        cls = fallback_class(config)
        if linear is not None and linear.tp_size != 1:
            raise UnsupportedModelError("the transformers fallback runs unsharded")
        self.config = config
        self.dtype = to_torch_dtype(dtype)
        self.device = torch.device(device)
        self.attention_specs = self.attention_layer_specs(config)
        register_attention()
        # a class of the checkpoint's own (auto_map, registered by load_config under --trust-remote-code)
        remote = cls.__module__.startswith("transformers_modules")
        if remote:
            self.implementation_note = "transformers fallback with the checkpoint's code"
        log.warning(
            "%s has no native implementation: it runs on the transformers fallback (%s%s with tgi's paged "
            "attention)", (config.architectures or [cls.__name__])[0], cls.__name__,
            " from the checkpoint's own code, --trust-remote-code" if remote else "",
        )  # fmt: skip
        # a copy: transformers records the attention implementation in the config it builds from
        with torch.device(self.device), no_init_weights():  # parameters are filled by load_weights
            self.hf = AutoModelForCausalLM.from_config(
                copy.deepcopy(config), attn_implementation=ATTENTION_NAME, dtype=self.dtype
            )
        self.hf.eval().requires_grad_(False)

    # ---- forward
    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, ctx: AttentionContext
    ) -> torch.Tensor:
        """input_ids [T], positions [T] -> logits [T, vocab] (the whole causal-LM forward)."""
        token = _STEP.set(ctx)
        try:
            out = self.hf(input_ids=input_ids[None], position_ids=positions[None], use_cache=False)
        finally:
            _STEP.reset(token)
        return out.logits[0]

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """`forward`'s rows (already logits) -> float32."""
        return hidden.float()

    # ---- weights
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Copy checkpoint tensors into transformers' parameters by name, renamed as transformers renames
        them on loading (its `WeightRenaming`s, the `base_model_prefix`), then tie what the model ties.
        Raises on names that need a tensor conversion (transformers' `WeightConverter`s: merged experts and
        the like), unknown names and missing ones."""
        params = dict(self.hf.named_parameters())
        buffers = dict(self.hf.named_buffers())
        ignored = [re.compile(p) for p in getattr(self.hf, "_keys_to_ignore_on_load_unexpected", None) or []]
        rename = _checkpoint_renamer(self.hf, params)
        loaded: set[int] = set()
        for name, tensor in weights:
            target, converted = rename(name)
            if converted:
                raise UnsupportedModelError(
                    f"transformers fallback ({type(self.hf).__name__}): checkpoint tensor '{name}' needs "
                    "transformers' conversion on loading, which the fallback does not do"
                )
            if target not in params:
                if target in buffers or name in buffers or any(p.search(name) for p in ignored):
                    continue
                raise ValueError(
                    f"transformers fallback ({type(self.hf).__name__}): unexpected weight '{name}' in the "
                    "checkpoint"
                )
            param = params[target]
            if tuple(param.shape) != tuple(tensor.shape):
                raise ValueError(
                    f"weight '{name}' of shape {tuple(tensor.shape)} does not fit {tuple(param.shape)}"
                )
            with torch.no_grad():
                param.copy_(tensor)
            loaded.add(id(param))
        self.hf.tie_weights()
        missing = sorted(n for n, p in self.hf.named_parameters() if id(p) not in loaded)
        if missing:
            raise ValueError(
                f"transformers fallback: weights missing from the checkpoint: {', '.join(missing)}"
            )

    # ---- what the engine asks
    def kv_cache_spec(self, block_size: int, dtype: str) -> KVCacheSpec:
        spec = self.attention_specs[0]
        return KVCacheSpec(len(self.attention_specs), spec.num_kv_heads, spec.head_dim, block_size, dtype)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def _checkpoint_renamer(hf: nn.Module, params: dict[str, torch.Tensor]):
    """name -> (the parameter name transformers loads it as, whether it needs a tensor conversion)."""
    from transformers.conversion_mapping import get_model_conversion_mapping
    from transformers.core_model_loading import WeightConverter, WeightRenaming, rename_source_key

    transforms = get_model_conversion_mapping(hf)
    renamings = [t for t in transforms if isinstance(t, WeightRenaming)]
    converters = [t for t in transforms if isinstance(t, WeightConverter)]
    prefix = getattr(hf, "base_model_prefix", None) or None

    def rename(name: str) -> tuple[str, bool]:
        target, converter = rename_source_key(name, renamings, converters, prefix, params)
        return target, converter is not None

    return rename
