"""What core's vision-language models share: a native text decoder (a `CausalLM` subclass) that is handed the
whole model's config and checkpoint, with transformers' vision tower and projector beside it.

`VisionLanguageDecoder` is a mixin put before the decoder class in a model's bases
(`class Idefics3ForConditionalGeneration(VisionLanguageDecoder, LlamaForCausalLM)`). It gives the decoder's
hooks (`tgi.core.models.base.CausalLM`) the text config inside the whole one, refuses tensor parallelism
(the vision tower does not run sharded), and translates the checkpoint's weight names into the module's
local ones. A model states only its tables (`checkpoint_prefixes`, `checkpoint_renames`, `tower_modules`),
whose entries ending in "." are prefixes of names and whose others are whole names. `LlavaLayoutDecoder` holds
the tables of transformers' LLaVA layout, which LLaVA, LLaVA-NeXT and Gemma 3 share.
"""

from __future__ import annotations

import copy
from typing import Any

import torch

from tgi.core.interfaces.types import AttentionLayerSpec
from tgi.core.models.registry import UnsupportedModelError


class VisionLanguageDecoder:
    """A text decoder inside a vision-language model: config and checkpoint names of the whole model."""

    #: how a refusal names the model (its architecture when None)
    display_name: str | None = None
    #: whether transformers ties the output head by the whole config's `tie_word_embeddings` (not the text
    #: config's): the text config the decoder gets is then a copy carrying the whole one's setting
    ties_head_by_outer_config = False
    #: (checkpoint prefix, local prefix): the first prefix a weight's name starts with is replaced
    checkpoint_prefixes: tuple[tuple[str, str], ...] = ()
    #: (part, replacement): then replaced anywhere in the name (llava-hf's `vision_tower.vision_model.`)
    checkpoint_renames: tuple[tuple[str, str], ...] = ()
    #: local prefixes of transformers' modules (tower, projector): their weights load as they are named, with
    #: no fused q/k/v or gate/up; the rest is the decoder's, loaded by `CausalLM`'s hooks
    tower_modules: tuple[str, ...] = ()

    # ---- config: the decoder's hooks get the text config
    @classmethod
    def text_config_of(cls, config: Any) -> Any:
        """The decoder's config inside the whole model's (the decoder's own config: itself)."""
        text = getattr(config, "text_config", None)
        if text is None or not cls.ties_head_by_outer_config:
            return config if text is None else text
        text = copy.copy(text)
        text.tie_word_embeddings = bool(getattr(config, "tie_word_embeddings", False))
        return text

    @classmethod
    def attention_layer_specs(cls, config: Any, tp_size: int = 1) -> list[AttentionLayerSpec]:
        """The decoder's attention (`CausalLM.attention_layer_specs` on the text config), after
        `check_config` saw the whole config; `UnsupportedModelError` for more than one shard."""
        cls.check_config(config)
        if tp_size > 1 and hasattr(config, "vision_config"):
            raise UnsupportedModelError(
                f"{cls.display_name or cls.architecture}'s vision tower does not run under tensor parallelism"
            )
        return super().attention_layer_specs(cls.text_config_of(config), tp_size)

    # ---- weights: the checkpoint's names -> the module's
    @classmethod
    def _local_name(cls, name: str) -> str:
        """A checkpoint tensor's name as this module names its parameter (`checkpoint_prefixes`, then
        `checkpoint_renames`)."""
        for prefix, local in cls.checkpoint_prefixes:
            if _under(name, prefix):
                name = local + name[len(prefix) :]
                break
        for part, replacement in cls.checkpoint_renames:
            name = name.replace(part, replacement)
        return name

    def skip_weight(self, name: str) -> bool:
        """`CausalLM.skip_weight` on the local name."""
        return super().skip_weight(self._local_name(name))

    def checkpoint_parts(self, name: str, tensor: torch.Tensor) -> list[tuple[str, object, torch.Tensor]]:
        """A tower module's tensor whole; the decoder's as `CausalLM.checkpoint_parts` splits it."""
        local = self._local_name(name)
        if any(_under(local, module) for module in self.tower_modules):
            return [(local, None, tensor)]
        return super().checkpoint_parts(local, tensor)

    def checkpoint_target(self, name: str) -> tuple[str, object]:
        """A tower module's parameter as named; the decoder's as `CausalLM.checkpoint_target` finds it."""
        local = self._local_name(name)
        if any(_under(local, module) for module in self.tower_modules):
            return local, None
        return super().checkpoint_target(local)


def _under(name: str, entry: str) -> bool:
    """Whether a table's `entry` covers `name`: as its prefix where it ends in ".", else as the whole name."""
    return name.startswith(entry) if entry.endswith(".") else name == entry


class LlavaLayoutDecoder(VisionLanguageDecoder):
    """The checkpoint layout of transformers' LLaVA, which its LLaVA-NeXT and Gemma 3 share: the llava-hf one
    (language_model.model.*, language_model.lm_head.*, vision_tower.vision_model.*, multi_modal_projector.*)
    and transformers 5's (model.language_model.*, model.vision_tower.*, model.multi_modal_projector.*,
    lm_head.*), onto the modules `model`, `lm_head`, `vision_tower` (the tower's inner model) and
    `multi_modal_projector`."""

    checkpoint_prefixes = (
        ("model.language_model.", "model."),
        ("language_model.model.", "model."),
        ("language_model.lm_head.", "lm_head."),
        ("model.vision_tower.", "vision_tower."),
        ("model.multi_modal_projector.", "multi_modal_projector."),
    )
    checkpoint_renames = (("vision_tower.vision_model.", "vision_tower."),)
    tower_modules = ("vision_tower.", "multi_modal_projector.")
