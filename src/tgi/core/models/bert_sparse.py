"""BERT with its masked-LM head, as a sparse embedder (SPLADE: sentence-transformers' `SparseEncoder`
with an `MLMTransformer` and a `SpladePooling` module), through transformers' own modules.

`forward` is `BertEncoder`'s (a step's flat prompts padded into rows, every token attending to every other,
[T, hidden] back); `token_logits` is the masked-LM head over the vocabulary, which the engine's pooling makes
into SPLADE's weights (`tgi.core.interfaces.pooling.PoolingSpec`, kind "sparse").
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

from tgi.core.models.bert import BertEncoder, check_complete, copy_by_name, encoder_config


class BertSparseEncoder(BertEncoder):
    """transformers' `BertForMaskedLM`: the encoder (`forward`) and its masked-LM head (`token_logits`)."""

    architecture = "BertForMaskedLM"

    def __init__(self, config: Any, *, dtype: torch.dtype, device: object, linear: object = None) -> None:
        nn.Module.__init__(self)
        from transformers import BertForMaskedLM

        self.config = config = encoder_config(self.architecture, config, linear)
        masked_lm = BertForMaskedLM(config).to(device=device, dtype=dtype)
        self.bert, self.cls = masked_lm.bert, masked_lm.cls  # the checkpoint's names: `bert.*`, `cls.*`
        self._tied = bool(getattr(config, "tie_word_embeddings", True))
        for p in self.parameters():
            p.requires_grad_(False)

    def load_weights(self, weights: Iterable[tuple[str, torch.Tensor]]) -> None:
        """The checkpoint's tensors by their names in `BertForMaskedLM`; the head's decoder is the word
        embeddings where the config ties them (its own tensor, where the checkpoint has one, otherwise);
        raises on unknown or missing names."""
        loaded = copy_by_name(self, weights)
        decoder = self.cls.predictions.decoder
        if "cls.predictions.decoder.weight" not in loaded and self._tied:
            decoder.weight = self.bert.embeddings.word_embeddings.weight
            loaded.add("cls.predictions.decoder.weight")
        if "cls.predictions.decoder.bias" not in loaded and decoder.bias is not None:
            decoder.bias = self.cls.predictions.bias  # transformers ties the head's bias so
            loaded.add("cls.predictions.decoder.bias")
        check_complete(self, loaded)

    def token_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final hidden states [L, hidden] -> the masked-LM head's logits [L, vocab]."""
        return self.cls(hidden)
