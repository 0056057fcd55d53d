"""BERT as an encoder for pooling (embeddings), through transformers' own modules: every token of a prompt
attends to every other (both ways), and nothing is kept in the KV cache.

A step's sequences come flat ([T], each a whole prompt: a pooling runner never chunks them) with their
positions; each starts at position 0, which is where the flat tokens are cut into rows. The rows are padded
into one batch [B, L] with an attention mask, run through transformers' `BertModel` (no pooler head: the
engine pools), and the padding is dropped again, so `forward` returns [T, hidden] like a native model.

The engine still sizes a KV cache of one head of one layer for it, which it never writes: the blocks count
the tokens of the requests in flight, for admission and limits, as they do for a decoder.

`XLMRobertaEncoder` and `XLMRobertaClassifier` are the same code over transformers' XLM-RoBERTa classes
(the rows padded with its padding token, from which transformers numbers its positions; no segments).

`BertClassifier` is `BertForSequenceClassification` (cross-encoders among them): the same encoder with its
pooler, and `classify` makes the first tokens' hidden states into logits. A pair of texts comes as BERT's
template makes it, `[CLS] a [SEP] b [SEP]`: a row's last token is its separator, and the tokens after its
first occurrence are the second segment (token type 1), as the tokenizer's `token_type_ids` say.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from tgi.core.interfaces.types import AttentionLayerSpec
from tgi.core.models.context import AttentionContext
from tgi.core.models.registry import UnsupportedModelError

#: buffers the model makes itself, not in a checkpoint
_OWN_BUFFERS = ("position_ids", "token_type_ids")


class BertEncoder(nn.Module):
    """transformers' `BertModel` without its pooler, run over a step's flat prompts. A subclass serves
    another encoder of BERT's shape by naming its transformers class (`architecture`) and the checkpoint's
    prefix of its encoder (`prefix`)."""

    architecture = "BertModel"  # also the transformers class built
    prefix = "bert"  # the encoder's attribute, and its tensors' prefix in a checkpoint with a head
    implementation_note = "transformers modules, bidirectional"
    _pairs = False  # its rows may be pairs of texts (`BertClassifier`): token types from the separator

    def __init__(self, config: Any, *, dtype: torch.dtype, device: object, linear: object = None) -> None:
        super().__init__()
        import transformers

        self.config = config = encoder_config(self.architecture, config, linear)
        model = getattr(transformers, self.architecture)(config, add_pooling_layer=False)
        setattr(self, self.prefix, model.to(device=device, dtype=dtype))
        for p in self.parameters():
            p.requires_grad_(False)

    @classmethod
    def attention_layer_specs(cls, config: Any, tp_size: int = 1) -> list[AttentionLayerSpec]:
        """One head of one layer (the KV cache only counts tokens: see the module docstring), the smallest
        cache the engine can size with the model's own head size."""
        head_dim = config.hidden_size // config.num_attention_heads
        return [AttentionLayerSpec(num_heads=1, num_kv_heads=1, head_dim=head_dim, scale=head_dim**-0.5)]

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """The checkpoint's tensors by their names in the encoder (its prefix and the pooler and language
        model heads dropped); raises on unknown or missing names."""
        encoder = getattr(self, self.prefix)
        params = dict(encoder.state_dict())
        loaded: set[str] = set()
        for name, tensor in weights:
            name = name.removeprefix(self.prefix + ".")
            if name.startswith(("pooler.", "cls.", "lm_head.")):
                continue  # the pooler / masked-LM heads: the engine pools the hidden states itself
            if name not in params:
                raise ValueError(f"{self.architecture}: unexpected weight '{name}' in the checkpoint")
            with torch.no_grad():
                params[name].copy_(tensor.to(params[name].dtype))
            loaded.add(name)
        missing = sorted(n for n in params if n not in loaded and not n.endswith(_OWN_BUFFERS))
        if missing:
            raise ValueError(
                f"{self.architecture}: weights missing from the checkpoint: {', '.join(missing)}"
            )

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, ctx: AttentionContext
    ) -> torch.Tensor:
        """input_ids, positions [T] (each prompt from position 0) -> final hidden states [T, hidden].

        The rows are padded with the model's padding token, so that an encoder that numbers its positions
        from the input ids (RoBERTa's: after the padding index, skipping padding) gives each row the
        positions it gives the row alone."""
        starts = torch.nonzero(positions == 0).flatten().tolist()
        bounds = list(zip(starts, [*starts[1:], input_ids.shape[0]], strict=True))
        longest = max(end - start for start, end in bounds)
        rows = input_ids.new_full((len(bounds), longest), getattr(self.config, "pad_token_id", None) or 0)
        mask = torch.zeros_like(rows)
        for i, (start, end) in enumerate(bounds):
            rows[i, : end - start] = input_ids[start:end]
            mask[i, : end - start] = 1
        types = self.token_types(rows, mask) if self._pairs else None
        encoder = getattr(self, self.prefix)
        hidden = encoder(input_ids=rows, attention_mask=mask, token_type_ids=types).last_hidden_state
        return hidden[mask.bool()]  # [T, H], the rows' tokens in order


class _RobertaPositions:
    """RoBERTa numbers a row's positions after the padding index, so `max_position_embeddings` less
    `pad_token_id` + 1 tokens fit (512 of XLM-RoBERTa's 514): the context length the engine reads from
    `text_config`."""

    def __init__(self, config: Any, **kwargs: Any) -> None:
        import copy

        super().__init__(config, **kwargs)
        self.text_config = copy.deepcopy(self.config)
        self.text_config.max_position_embeddings -= (self.config.pad_token_id or 0) + 1


class XLMRobertaEncoder(_RobertaPositions, BertEncoder):
    """transformers' `XLMRobertaModel` (bge-m3, multilingual-e5): BERT's layers, positions numbered after
    the padding index (from the input ids, by transformers), one token type."""

    architecture = "XLMRobertaModel"
    prefix = "roberta"


class RobertaEncoder(XLMRobertaEncoder):
    """transformers' `RobertaModel` (all-roberta-large-v1, all-distilroberta-v1): XLM-RoBERTa's code, which
    transformers' XLM-RoBERTa classes share with it."""

    architecture = "RobertaModel"


class BertClassifier(BertEncoder):
    """transformers' `BertForSequenceClassification`: the encoder (`forward`, its pooler kept) and the
    classification head (`classify`)."""

    architecture = "BertForSequenceClassification"
    _pairs = True

    def __init__(self, config: Any, *, dtype: torch.dtype, device: object, linear: object = None) -> None:
        nn.Module.__init__(self)
        import transformers

        self.config = config = encoder_config(self.architecture, config, linear)
        model = getattr(transformers, self.architecture)(config).to(device=device, dtype=dtype)
        setattr(self, self.prefix, getattr(model, self.prefix))  # the checkpoint's names: `bert.*`, ...
        self.classifier = model.classifier
        for p in self.parameters():
            p.requires_grad_(False)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """The checkpoint's tensors by their names in the transformers class; raises on unknown or missing
        names."""
        check_complete(self, copy_by_name(self, weights))

    def token_types(self, rows: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """rows, mask [B, L] -> token type ids [B, L]: 1 after the first occurrence of each row's last token
        (its separator) where it occurs again later (a pair), else 0 (one text); no host sync."""
        last = rows.gather(1, (mask.sum(dim=1, keepdim=True) - 1).clamp(min=0))  # [B, 1]
        sep = (rows == last) & mask.bool()  # [B, L]
        after_first = (sep.cumsum(dim=1) - sep.long()) >= 1  # strictly after the first separator
        pair = sep.sum(dim=1, keepdim=True) > 1
        return (after_first & mask.bool() & pair).long()

    def classify(self, first: torch.Tensor) -> torch.Tensor:
        """The first tokens' hidden states [N, hidden] -> logits [N, num_labels] (the pooler's dense and
        tanh, then the classifier; dropout is off at inference)."""
        return self.classifier(self.bert.pooler.activation(self.bert.pooler.dense(first)))


class XLMRobertaClassifier(_RobertaPositions, BertClassifier):
    """transformers' `XLMRobertaForSequenceClassification` (bge-reranker-v2-m3, jina rerankers): no pooler;
    its head (dense, tanh, out_proj) reads the first token. A pair is `<s> a </s></s> b </s>` as the
    tokenizer makes it, all of token type 0 (one type): no segments are read."""

    architecture = "XLMRobertaForSequenceClassification"
    prefix = "roberta"
    _pairs = False

    def classify(self, first: torch.Tensor) -> torch.Tensor:
        """The first tokens' hidden states [N, hidden] -> logits [N, num_labels] (dropout off)."""
        return self.classifier(first[:, None, :])  # the head takes [N, L, hidden] and reads token 0


class RobertaClassifier(XLMRobertaClassifier):
    """transformers' `RobertaForSequenceClassification` (cross-encoder/stsb-roberta-*): XLM-RoBERTa's."""

    architecture = "RobertaForSequenceClassification"


def copy_by_name(model: nn.Module, weights: Iterable[tuple[str, torch.Tensor]]) -> set[str]:
    """Each checkpoint tensor copied into `model`'s parameter or buffer of the same name (in its dtype); the
    names copied. Raises on a name `model` does not have."""
    params = dict(model.state_dict())
    loaded: set[str] = set()
    for name, tensor in weights:
        if name not in params:
            raise ValueError(f"{model.architecture}: unexpected weight '{name}' in the checkpoint")
        with torch.no_grad():
            params[name].copy_(tensor.to(params[name].dtype))
        loaded.add(name)
    return loaded


def check_complete(model: nn.Module, loaded: set[str]) -> None:
    """Raises naming `model`'s parameters and buffers the checkpoint did not hold (`loaded`: those it did;
    position ids are the model's own)."""
    missing = sorted(n for n in model.state_dict() if n not in loaded and not n.endswith(_OWN_BUFFERS))
    if missing:
        raise ValueError(f"{model.architecture}: weights missing from the checkpoint: {', '.join(missing)}")


def sdpa_config(config: Any) -> Any:
    """`config` with torch's scaled-dot-product attention, as transformers runs BERT by default."""
    import copy

    config = copy.deepcopy(config)
    config._attn_implementation = "sdpa"
    return config


def encoder_config(architecture: str, config: Any, linear: object) -> Any:
    """`config` as the encoder runs it (`sdpa_config`); `UnsupportedModelError` naming what is not served:
    tensor parallelism, a decoder's or cross-attention's settings."""
    if linear is not None:
        raise UnsupportedModelError(f"{architecture}: tensor parallelism is not served for encoders")
    for key in ("is_decoder", "add_cross_attention"):
        if getattr(config, key, False):
            raise UnsupportedModelError(f"{architecture}: {key}=true is not served (an encoder only)")
    return sdpa_config(config)
