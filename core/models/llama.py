"""The Llama family (Llama 2/3, SmolLM2, Mistral, Qwen2) on core's abstract paged attention.

The model never imports a backend: each forward receives an `AttentionContext` (attention backend, KV cache,
step metadata). Tokens are flat ([T]); prefill-chunk tokens come first, then one token per decoding
sequence, as `AttentionMetadata` describes.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from tgi.core.dtypes import to_torch_dtype
from tgi.core.interfaces.types import AttentionLayerSpec, KVCacheSpec
from tgi.core.loading.block_weights import BlockWeight
from tgi.core.models.context import AttentionContext
from tgi.core.models.layers import GatedMLP, LinearFactory, RMSNorm, default_weight_loader
from tgi.core.models.rotary import RotaryEmbedding, apply_rotary, compute_inv_freq, head_dim_of

# checkpoint name part -> (fused module name part, shard id)
_STACKED = (
    (".q_proj.", ".qkv_proj.", "q"),
    (".k_proj.", ".qkv_proj.", "k"),
    (".v_proj.", ".qkv_proj.", "v"),
    (".gate_proj.", ".gate_up_proj.", "gate"),
    (".up_proj.", ".gate_up_proj.", "up"),
)


class LlamaAttention(nn.Module):
    #: callable(qkv [T, (H + 2 Hkv) * Dh], cos, sin, H + Hkv, Dh) rotating q and k in place as
    #: `apply_rotary` does, set by a backend
    rotary_kernel = None

    def __init__(
        self,
        hidden_size: int,
        spec: AttentionLayerSpec,
        layer_idx: int,
        qkv_bias: bool,
        o_bias: bool,
        linear: LinearFactory,
        dtype: torch.dtype,
        device: object,
    ) -> None:
        super().__init__()
        self.spec = spec  # per-rank heads
        self.layer_idx = layer_idx
        h, hkv, dh = spec.num_heads, spec.num_kv_heads, spec.head_dim
        self.q_size, self.kv_size = h * dh, hkv * dh
        self.qkv_proj = linear.merged_column(
            hidden_size, [self.q_size, self.kv_size, self.kv_size], ["q", "k", "v"], qkv_bias,
            dtype=dtype, device=device,
        )  # fmt: skip
        self.o_proj = linear.row(h * dh * linear.tp_size, hidden_size, o_bias, dtype=dtype, device=device)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, ctx: AttentionContext
    ) -> torch.Tensor:
        t = x.shape[0]
        spec = self.spec
        qkv = self.qkv_proj(x)
        if self.rotary_kernel is not None:
            self.rotary_kernel(qkv, cos, sin, spec.num_heads + spec.num_kv_heads, spec.head_dim)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(t, spec.num_heads, spec.head_dim)
        k = k.view(t, spec.num_kv_heads, spec.head_dim)
        if self.rotary_kernel is None:
            q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        v = v.view(t, spec.num_kv_heads, spec.head_dim)
        meta = ctx.meta
        ctx.kv_cache.write(self.layer_idx, k, v, meta.slot_mapping)
        tp, td = meta.num_prefill_tokens, meta.num_decode_tokens
        if td == 0 and tp == t:
            out = ctx.backend.prefill(q, k, v, ctx.kv_cache, self.layer_idx, meta, spec)
        elif tp == 0 and td == t:
            out = ctx.backend.decode(q, ctx.kv_cache, self.layer_idx, meta, spec)
        else:  # mixed step, possibly with padding tokens at the end (left as zeros)
            out = q.new_zeros(q.shape)
            if tp:
                out[:tp] = ctx.backend.prefill(
                    q[:tp], k[:tp], v[:tp], ctx.kv_cache, self.layer_idx, meta, spec
                )
            if td:
                out[tp : tp + td] = ctx.backend.decode(
                    q[tp : tp + td], ctx.kv_cache, self.layer_idx, meta, spec
                )
        return self.o_proj(out.reshape(t, self.q_size))


class LlamaDecoderLayer(nn.Module):
    def __init__(
        self,
        config: Any,
        spec: AttentionLayerSpec,
        layer_idx: int,
        qkv_bias: bool,
        o_bias: bool,
        mlp_bias: bool,
        linear: LinearFactory,
        dtype: torch.dtype,
        device: object,
    ) -> None:
        super().__init__()
        eps = config.rms_norm_eps
        self.input_layernorm = RMSNorm(config.hidden_size, eps, dtype, device)
        self.self_attn = LlamaAttention(
            config.hidden_size, spec, layer_idx, qkv_bias, o_bias, linear, dtype, device
        )
        self.post_attention_layernorm = RMSNorm(config.hidden_size, eps, dtype, device)
        self.mlp = GatedMLP(
            config.hidden_size,
            config.intermediate_size,
            getattr(config, "hidden_act", "silu"),
            mlp_bias,
            linear,
            dtype,
            device,
        )

    def forward(
        self,
        x: torch.Tensor,
        residual: torch.Tensor | None,
        cos: torch.Tensor,
        sin: torch.Tensor,
        ctx: AttentionContext,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        h, residual = self.input_layernorm(x, residual)
        h = self.self_attn(h, cos, sin, ctx)
        h, residual = self.post_attention_layernorm(h, residual)
        return self.mlp(h), residual


class LlamaModel(nn.Module):
    def __init__(
        self,
        config: Any,
        specs: list[AttentionLayerSpec],
        qkv_bias: bool,
        o_bias: bool,
        mlp_bias: bool,
        linear: LinearFactory,
        dtype: torch.dtype,
        device: object,
    ) -> None:
        super().__init__()
        self.embed_tokens = linear.embedding(
            config.vocab_size, config.hidden_size, dtype=dtype, device=device
        )
        self.layers = nn.ModuleList(
            LlamaDecoderLayer(config, spec, i, qkv_bias, o_bias, mlp_bias, linear, dtype, device)
            for i, spec in enumerate(specs)
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, dtype, device)


class LlamaForCausalLM(nn.Module):
    """Llama 2/3 and SmolLM2 (GQA, tied embeddings, llama3/linear/yarn rope scaling); the base of the
    Mistral and Qwen2 variants, which differ only in the class hooks below.

    Parameters are created uninitialised on `device` in `dtype`; `load_weights` must fill them (it raises
    if any is missing).
    """

    architecture = "LlamaForCausalLM"

    # ---- architecture hooks (config -> structure); subclasses override
    @classmethod
    def qkv_bias(cls, config: Any) -> bool:
        return bool(getattr(config, "attention_bias", False))

    @classmethod
    def o_bias(cls, config: Any) -> bool:
        return bool(getattr(config, "attention_bias", False))

    @classmethod
    def mlp_bias(cls, config: Any) -> bool:
        return bool(getattr(config, "mlp_bias", False))

    @classmethod
    def sliding_window(cls, config: Any, layer_idx: int) -> int | None:
        layer_types = getattr(config, "layer_types", None)
        window = getattr(config, "sliding_window", None)
        if layer_types is not None and window is not None:
            return window if layer_types[layer_idx] == "sliding_attention" else None
        return None

    @classmethod
    def attention_layer_specs(cls, config: Any, tp_size: int = 1) -> list[AttentionLayerSpec]:
        heads = config.num_attention_heads
        kv_heads = getattr(config, "num_key_value_heads", None) or heads
        if heads % tp_size:
            raise ValueError(
                f"{heads} attention heads are not divisible by {tp_size} shards (the model has {heads} "
                f"query and {kv_heads} key/value heads)"
            )
        # fewer key/value heads than shards: each is replicated on tp_size // kv_heads ranks (as TGI, vLLM)
        if kv_heads % tp_size and tp_size % kv_heads:
            raise ValueError(
                f"{kv_heads} key/value heads can neither be split over nor replicated on {tp_size} shards "
                f"(the model has {heads} query and {kv_heads} key/value heads)"
            )
        head_dim = head_dim_of(config)
        return [
            AttentionLayerSpec(
                num_heads=heads // tp_size,
                num_kv_heads=max(1, kv_heads // tp_size),
                head_dim=head_dim,
                scale=head_dim**-0.5,
                sliding_window=cls.sliding_window(config, i),
                softcap=None,
            )
            for i in range(config.num_hidden_layers)
        ]

    # ---- construction
    def __init__(
        self,
        config: Any,
        *,
        dtype: torch.dtype | str = torch.float32,
        device: torch.device | str = "cpu",
        linear: LinearFactory | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.dtype = to_torch_dtype(dtype)
        self.device = torch.device(device)
        linear = linear or LinearFactory()
        self.linear = linear
        self.attention_specs = self.attention_layer_specs(config, linear.tp_size)
        self.model = LlamaModel(
            config,
            self.attention_specs,
            self.qkv_bias(config),
            self.o_bias(config),
            self.mlp_bias(config),
            linear,
            self.dtype,
            "meta",
        )
        self.lm_head = linear.lm_head(config.hidden_size, config.vocab_size, dtype=self.dtype, device="meta")
        self.to_empty(device=self.device)  # no random init: weights come from load_weights
        for p in self.parameters():
            p.requires_grad_(False)
        self.tie_word_embeddings = bool(getattr(config, "tie_word_embeddings", False))
        if self.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        inv_freq, scaling = compute_inv_freq(config)
        self.rotary = RotaryEmbedding(inv_freq, scaling).to(self.device)

    # ---- forward
    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, ctx: AttentionContext
    ) -> torch.Tensor:
        """input_ids [T], positions [T] -> final hidden states [T, hidden] (after the last norm)."""
        x = self.model.embed_tokens(input_ids)
        cos, sin = self.rotary.cos_sin(positions, x.dtype)
        residual = None
        for layer in self.model.layers:
            x, residual = layer(x, residual, cos, sin, ctx)
        x, _ = self.model.norm(x, residual)
        return x

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [N, hidden] -> logits [N, vocab] float32."""
        return self.lm_head(hidden).float()

    # ---- weights
    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load Hugging Face-named tensors (as in transformers' state_dict), cast to the model dtype.
        A missing `lm_head.weight` ties the head to the embeddings. Raises on unknown or missing names."""
        params = dict(self.named_parameters(remove_duplicate=False))
        modules = dict(self.named_modules())
        loaded: set[str] = set()
        for name, tensor in weights:
            if "rotary_emb." in name:
                continue
            if name == "lm_head.weight" and self.tie_word_embeddings:
                continue
            target, shard = name, None
            for hf_part, fused_part, shard_id in _STACKED:
                if hf_part in name:
                    target, shard = name.replace(hf_part, fused_part), shard_id
                    break
            param = params.get(target)
            if param is None:
                raise ValueError(f"{self.architecture}: unexpected weight '{name}' in the checkpoint")
            loader = getattr(modules[target.rpartition(".")[0]], "weight_loader", default_weight_loader)
            try:
                with torch.no_grad():
                    loader(param, tensor, shard)
            except ValueError as e:
                raise ValueError(f"{self.architecture}: weight '{name}': {e}") from None
            loaded.add(target if shard is None else f"{target}:{shard}")
        if "lm_head.weight" not in loaded and self.lm_head.weight is not self.model.embed_tokens.weight:
            self.lm_head.weight = self.model.embed_tokens.weight
            self.tie_word_embeddings = True
        expected = set()
        for name, _ in self.named_parameters():
            shard_ids = getattr(modules[name.rpartition(".")[0]], "shard_ids", None)
            expected.update([f"{name}:{s}" for s in shard_ids] if shard_ids else [name])
        missing = sorted(expected - loaded)
        if missing:
            raise ValueError(
                f"{self.architecture}: weights missing from the checkpoint: {', '.join(missing)}"
            )

    def attach_block_weights(self, weights: Iterable[tuple[str, BlockWeight]]) -> int:
        """Attach the checkpoint's block-quantized weights (see `tgi.core.loading.block_weights`) to the
        linears they belong to, as `module.block_weight`, after `load_weights`. A fused linear (q/k/v,
        gate/up) gets one only when all its parts come in the same format; the tied head gets the
        embeddings'. Returns how many linears got one."""
        modules = dict(self.named_modules())
        parts: dict[str, dict[object, BlockWeight]] = {}
        for name, weight in weights:
            target, shard = name, None
            for hf_part, fused_part, shard_id in _STACKED:
                if hf_part in name:
                    target, shard = name.replace(hf_part, fused_part), shard_id
                    break
            if name == "model.embed_tokens.weight" and self.tie_word_embeddings:
                target = "lm_head.weight"
            parts.setdefault(target.rpartition(".")[0], {})[shard] = weight
        count = 0
        for module_name, by_shard in parts.items():
            module = modules.get(module_name)
            if module is None or not hasattr(module, "linear_kernel"):
                continue  # not a linear (the embedding table)
            shard_ids = getattr(module, "shard_ids", [None])
            if any(s not in by_shard for s in shard_ids):
                continue
            try:
                block = BlockWeight.concat(by_shard[s] for s in shard_ids)
            except ValueError:
                continue  # fused parts stored in different formats: the dense weight serves
            if (block.rows, block.cols) != tuple(module.weight.shape):
                raise ValueError(
                    f"{self.architecture}: block weight {module_name} is [{block.rows}, {block.cols}], "
                    f"the layer {tuple(module.weight.shape)}"
                )
            module.block_weight = block
            count += 1
        return count

    # ---- what the engine asks
    def kv_cache_spec(self, block_size: int, dtype: str) -> KVCacheSpec:
        spec = self.attention_specs[0]
        return KVCacheSpec(len(self.attention_specs), spec.num_kv_heads, spec.head_dim, block_size, dtype)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


class MistralForCausalLM(LlamaForCausalLM):
    """Llama with a sliding window on every layer (when the config sets one)."""

    architecture = "MistralForCausalLM"

    @classmethod
    def qkv_bias(cls, config: Any) -> bool:
        return False

    o_bias = qkv_bias
    mlp_bias = qkv_bias

    @classmethod
    def sliding_window(cls, config: Any, layer_idx: int) -> int | None:
        layer_types = getattr(config, "layer_types", None)
        if layer_types is not None and getattr(config, "sliding_window", None) is not None:
            return super().sliding_window(config, layer_idx)
        return getattr(config, "sliding_window", None)


class Qwen2ForCausalLM(LlamaForCausalLM):
    """Llama with q/k/v biases; sliding window only when `use_sliding_window`, on layers
    >= `max_window_layers` (as `config.layer_types` says in recent transformers)."""

    architecture = "Qwen2ForCausalLM"

    @classmethod
    def qkv_bias(cls, config: Any) -> bool:
        return True

    @classmethod
    def o_bias(cls, config: Any) -> bool:
        return False

    @classmethod
    def mlp_bias(cls, config: Any) -> bool:
        return False

    @classmethod
    def sliding_window(cls, config: Any, layer_idx: int) -> int | None:
        if not getattr(config, "use_sliding_window", False):
            return None
        window = getattr(config, "sliding_window", None)
        layer_types = getattr(config, "layer_types", None)
        if layer_types is not None:
            return window if layer_types[layer_idx] == "sliding_attention" else None
        return window if layer_idx >= getattr(config, "max_window_layers", 0) else None
