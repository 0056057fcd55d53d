"""What every native causal LM shares: the attention shape read from the config (class hooks), building
on the meta device and materialising empty, the forward loop (embed, layers, final norm), logits, and
loading Hugging Face-named weights (fused parts, split fused tensors, tied heads, block weights).

A model file subclasses `CausalLM`, builds `self.model` (with `embed_tokens`, `layers`, `norm`) and
`self.lm_head` in `__init__` between `super().__init__(...)` and `self.finish_init()`, and overrides the
hooks its architecture changes. A decoder layer is called as `layer(x, residual, cos, sin, ctx)` and
returns `(x, residual)` (the residual stream may be carried separately so that the next norm adds it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from tgi.core.dtypes import to_torch_dtype
from tgi.core.interfaces.types import AttentionLayerSpec, KVCacheSpec
from tgi.core.models.context import AttentionContext, token_seq_lens
from tgi.core.models.layers import LinearFactory, default_weight_loader
from tgi.core.models.rotary import head_dim_of, rotary_embedding
from tgi.core.quant.kernels import drop_dense_weight
from tgi.core.quant.weights import QuantizedWeight, RowParts

#: checkpoint name part -> (fused module name part, shard id): separate q/k/v and gate/up tensors
#: loaded into the fused linears
STACKED_QKV_GATE_UP = (
    (".q_proj.", ".qkv_proj.", "q"),
    (".k_proj.", ".qkv_proj.", "k"),
    (".v_proj.", ".qkv_proj.", "v"),
    (".gate_proj.", ".gate_up_proj.", "gate"),
    (".up_proj.", ".gate_up_proj.", "up"),
)


class CausalLM(nn.Module):
    """Base of core's models. Parameters are created uninitialised on `device` in `dtype`;
    `load_weights` must fill them (it raises if any is missing)."""

    architecture = "CausalLM"
    stacked_params: tuple[tuple[str, str, object], ...] = STACKED_QKV_GATE_UP
    embed_param = "model.embed_tokens.weight"  # the table the output head is tied to

    # ---- architecture hooks (config -> structure); subclasses override
    @classmethod
    def check_config(cls, config: Any) -> None:
        """Raise `UnsupportedModelError` naming a setting of `config` this model does not implement."""

    @classmethod
    def num_kv_heads(cls, config: Any) -> int:
        return getattr(config, "num_key_value_heads", None) or config.num_attention_heads

    @classmethod
    def head_dim(cls, config: Any) -> int:
        return head_dim_of(config)

    @classmethod
    def attention_scale(cls, config: Any) -> float:
        return cls.head_dim(config) ** -0.5

    @classmethod
    def attention_softcap(cls, config: Any) -> float | None:
        return None

    @classmethod
    def sliding_window(cls, config: Any, layer_idx: int) -> int | None:
        """The window of layer `layer_idx`: per `config.layer_types` where the config has them."""
        layer_types = getattr(config, "layer_types", None)
        window = getattr(config, "sliding_window", None)
        if layer_types is not None and window is not None:
            return window if layer_types[layer_idx] == "sliding_attention" else None
        return None

    @classmethod
    def sharded_sizes(cls, config: Any) -> dict[str, int]:
        """Sizes that tensor parallelism splits besides the heads (name in a refusal -> size)."""
        inter = getattr(config, "intermediate_size", None)
        return {} if inter is None else {"the MLP's intermediate size": inter}

    @classmethod
    def attention_layer_specs(cls, config: Any, tp_size: int = 1) -> list[AttentionLayerSpec]:
        """Every layer's attention, per rank; raises `ValueError` when the heads cannot be split over
        `tp_size` ranks (and `UnsupportedModelError` for a setting the model does not implement)."""
        cls.check_config(config)
        heads, kv_heads = config.num_attention_heads, cls.num_kv_heads(config)
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
        head_dim = cls.head_dim(config)
        return [
            AttentionLayerSpec(
                num_heads=heads // tp_size,
                num_kv_heads=max(1, kv_heads // tp_size),
                head_dim=head_dim,
                scale=cls.attention_scale(config),
                sliding_window=cls.sliding_window(config, i),
                softcap=cls.attention_softcap(config),
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
        self.linear = linear or LinearFactory()
        self.attention_specs = self.attention_layer_specs(config, self.linear.tp_size)
        self.embed_scale: float | None = None  # multiplies the embeddings (Gemma: sqrt(hidden))
        self.final_logit_softcap: float | None = None  # logits -> cap * tanh(logits / cap) (Gemma 2)

    def finish_init(self) -> None:
        """After the subclass built its modules on "meta": materialise them empty on `device`, tie the head
        where the config says so, and make the rotary embedding."""
        self.to_empty(device=self.device)  # no random init: weights come from load_weights
        for p in self.parameters():
            p.requires_grad_(False)
        self.tie_word_embeddings = bool(getattr(self.config, "tie_word_embeddings", False))
        if self.tie_word_embeddings:
            self.lm_head.weight = self._embedding_weight()
        self.rotary = rotary_embedding(self.config, self.device)

    def _embedding_weight(self) -> nn.Parameter:
        return self.get_parameter(self.embed_param)

    # ---- forward
    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        x = self.model.embed_tokens(input_ids)
        if self.embed_scale is not None:
            x = x * torch.tensor(self.embed_scale, dtype=x.dtype)
        return x

    def decoder_layers(self) -> Iterable[nn.Module]:
        return self.model.layers

    def final_norm(self, x: torch.Tensor, residual: torch.Tensor | None) -> torch.Tensor:
        return self.model.norm(x, residual)[0]

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        ctx: AttentionContext,
        inputs_embeds: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """input_ids [T], positions [T] -> final hidden states [T, hidden] (after the last norm).
        `inputs_embeds` [T, hidden]: the tokens' embeddings as the caller made them (`embed`, with image
        placeholders replaced by the vision tower's output), instead of `embed(input_ids)`."""
        x = self.embed(input_ids) if inputs_embeds is None else inputs_embeds
        seq_lens = token_seq_lens(ctx.meta, x.shape[0]) if self.rotary.needs_seq_lens else None
        cos, sin = self.rotary.cos_sin(positions, x.dtype, seq_lens)
        residual = None
        for layer in self.decoder_layers():
            x, residual = layer(x, residual, cos, sin, ctx)
        return self.final_norm(x, residual)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """hidden [N, hidden] -> logits [N, vocab] float32."""
        logits = self.lm_head(hidden).float()
        cap = self.final_logit_softcap
        return logits if cap is None else torch.tanh(logits / cap) * cap

    # ---- weights
    def skip_weight(self, name: str) -> bool:
        """Checkpoint tensors the model does not use (rotary tables, the tied head)."""
        return "rotary_emb." in name or (name == "lm_head.weight" and self.tie_word_embeddings)

    def checkpoint_target(self, name: str) -> tuple[str, object]:
        """The parameter a checkpoint tensor goes to, and its part (shard id) of a fused parameter."""
        for hf_part, fused_part, shard_id in self.stacked_params:
            if hf_part in name:
                return name.replace(hf_part, fused_part), shard_id
        return name, None

    def checkpoint_parts(self, name: str, tensor: torch.Tensor) -> list[tuple[str, object, torch.Tensor]]:
        """(parameter, shard id, tensor) for each part of checkpoint tensor `name`; a model whose checkpoint
        stores fused tensors (Phi-3's qkv_proj) splits them here into the parts its layers know."""
        return [(*self.checkpoint_target(name), tensor)]

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load Hugging Face-named tensors (as in the checkpoint), cast to the model dtype. A missing
        `lm_head.weight` ties the head to the embeddings. Raises on unknown or missing names. A meta tensor
        stands for a weight loaded without its dense copy (`tgi.core.torch.dense_free_loading`): its module's
        dense weight is dropped (every part of it must come so)."""
        params = dict(self.named_parameters(remove_duplicate=False))
        modules = dict(self.named_modules())
        loaded: set[str] = set()
        dense_free: dict[str, nn.Module] = {}  # parameter -> its module, for weights that came as meta parts
        dense_parts: set[str] = set()  # parameters that got a dense part
        for name, tensor in weights:
            if self.skip_weight(name):
                continue
            for target, shard, part in self.checkpoint_parts(name, tensor):
                param = params.get(target)
                if param is None:
                    raise ValueError(f"{self.architecture}: unexpected weight '{name}' in the checkpoint")
                module = modules[target.rpartition(".")[0]]
                if part.is_meta:
                    if not target.endswith(".weight"):
                        raise ValueError(f"{self.architecture}: '{name}' came without its values")
                    dense_free[target] = module
                else:
                    dense_parts.add(target)
                    loader = getattr(module, "weight_loader", default_weight_loader)
                    try:
                        with torch.no_grad():
                            loader(param, part, shard)
                    except ValueError as e:
                        raise ValueError(f"{self.architecture}: weight '{name}': {e}") from None
                loaded.add(target if shard is None else f"{target}:{shard}")
        # (a pipeline stage without the output head has no `lm_head.weight` to tie)
        head = getattr(self.lm_head, "weight", None)
        if "lm_head.weight" not in loaded and head is not None and head is not self._embedding_weight():
            self.lm_head.weight = self._embedding_weight()
            self.tie_word_embeddings = True
        expected = set()
        for name, _ in self.named_parameters():
            module_name, _, param_name = name.rpartition(".")
            shard_ids = _shard_ids(modules[module_name], param_name)
            expected.update([f"{name}:{s}" for s in shard_ids] if shard_ids else [name])
        missing = sorted(expected - loaded)
        if missing:
            raise ValueError(
                f"{self.architecture}: weights missing from the checkpoint: {', '.join(missing)}"
            )
        for target, module in dense_free.items():
            if target in dense_parts:
                raise ValueError(f"{self.architecture}: {target} came partly without its dense values")
            drop_dense_weight(module)

    def attach_quantized_weights(
        self, weights: Iterable[tuple[str, QuantizedWeight]], required: bool = False
    ) -> int:
        """Attach quantized weights (see `tgi.core.quant`), named as the checkpoint names the dense weight
        they stand for, to the linears they belong to, as `module.quant_weight`, after `load_weights`. A
        fused linear (q/k/v, gate/up) gets the parts' `concat`, or `RowParts` when they are stored in
        different formats (each part then runs its own kernel); the tied head gets the embeddings'.
        With `required` (weights that come without a dense copy: GPTQ, AWQ, FP8 checkpoints) a linear whose
        parts are missing or cannot be fused raises `ValueError`; otherwise (GGUF blocks beside the dense
        weights) it keeps its dense weight alone. Returns how many linears got one."""
        modules = dict(self.named_modules())
        parts: dict[str, dict[object, QuantizedWeight]] = {}
        for name, weight in weights:
            target, shard = self.checkpoint_target(name)
            if name == self.embed_param and self.tie_word_embeddings:
                target = "lm_head.weight"
            parts.setdefault(target.rpartition(".")[0], {})[shard] = weight
        count = 0
        for module_name, by_shard in parts.items():
            module = modules.get(module_name)
            if module is None or not hasattr(module, "linear_kernel"):
                if required:
                    raise ValueError(f"{self.architecture}: quantized weight for {module_name}, not a linear")
                continue  # not a linear (the embedding table)
            shard_ids = getattr(module, "shard_ids", [None])
            try:
                missing = [s for s in shard_ids if s not in by_shard]
                if missing:
                    raise ValueError(f"parts {missing} are not quantized")
                weight = _fused([by_shard[s] for s in shard_ids])
            except ValueError as e:
                if required:
                    raise ValueError(f"{self.architecture}: {module_name}: {e}") from None
                continue  # parts of different widths: the dense weight serves
            if (weight.rows, weight.cols) != tuple(module.weight.shape):
                raise ValueError(
                    f"{self.architecture}: quantized weight {module_name} is [{weight.rows}, {weight.cols}], "
                    f"the layer {tuple(module.weight.shape)}"
                )
            module.quant_weight = weight
            count += 1
        return count

    # ---- what the engine asks
    def kv_cache_spec(self, block_size: int, dtype: str) -> KVCacheSpec:
        spec = self.attention_specs[0]
        return KVCacheSpec(len(self.attention_specs), spec.num_kv_heads, spec.head_dim, block_size, dtype)

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def _fused(parts: list[QuantizedWeight]) -> QuantizedWeight:
    """One weight for a linear's parts: the part itself, their `concat` where the format allows, else
    `RowParts` (parts in different formats, each computed by its own kernel). `ValueError` when the
    parts' widths differ."""
    if len(parts) == 1:
        return parts[0]
    try:
        return type(parts[0]).concat(parts)
    except ValueError:
        if len({p.format for p in parts}) == 1:
            raise  # one format that cannot be fused (groups, act-orders): not for RowParts to hide
        return RowParts.of(parts)


def _shard_ids(module: nn.Module, param_name: str) -> list[object] | None:
    """The parts `load_weights` expects for a module's parameter: `module.param_shard_ids[param_name]`
    where a module's parameters have different parts (grouped experts), else `module.shard_ids`."""
    per_param = getattr(module, "param_shard_ids", None)
    if per_param is not None:
        return per_param.get(param_name)
    return getattr(module, "shard_ids", None)
