"""Qwen2-VL and Qwen2.5-VL (`Qwen2VLForConditionalGeneration`, `Qwen2_5_VLForConditionalGeneration`): core's
Qwen2 decoder with multimodal RoPE, and transformers' own vision tower.

The decoder is native (`Qwen2ForCausalLM` on core's paged attention) with `MRotaryEmbedding`: an image's
placeholder tokens are rotated by their (temporal, height, width) grid positions, which the runner takes
from `request_positions()` (`tgi.core.models.mrope_positions`: computed once per request from its prompt
and its images' `image_grid_thw`). The vision tower is transformers' `Qwen2VisionTransformerPretrainedModel`
(Qwen2.5: `Qwen2_5_VisionTransformerPretrainedModel`, window attention) on the checkpoint's weights, its
patch merger included: `encode_images` turns one image's flattened patches and grid into the embeddings
of its placeholder tokens.
"""

from __future__ import annotations

from typing import Any

import torch

from tgi.core.models.llama import Qwen2ForCausalLM
from tgi.core.models.mrope_positions import GRID_KEY, RequestPositions
from tgi.core.models.registry import UnsupportedModelError
from tgi.core.models.rotary import MRotaryEmbedding, compute_inv_freq, rope_parameters
from tgi.core.models.vision_language import VisionLanguageDecoder

#: transformers' default when a config names no `mrope_section`
DEFAULT_MROPE_SECTION = (16, 24, 24)


def mrope_section_of(text_config: Any) -> list[int]:
    return list(rope_parameters(text_config).get("mrope_section") or DEFAULT_MROPE_SECTION)


class Qwen2VLForConditionalGeneration(VisionLanguageDecoder, Qwen2ForCausalLM):
    """Qwen2-VL: images in (`encode_images`, one embedding per placeholder token), M-RoPE positions
    (`request_positions`); the rest is Qwen2."""

    architecture = "Qwen2VLForConditionalGeneration"
    takes_images = True  # the runner runs `encode_images` on a request's images at prefill
    image_extras = (GRID_KEY,)  # the `ImageInput.extras` `encode_images` takes, as keyword tensors
    text_model_type = "qwen2_vl_text"
    vision_model_type = "qwen2_vl_vision"
    ties_head_by_outer_config = True
    # weights: transformers 5's layout (model.language_model.*, model.visual.*, lm_head) and the earlier one
    # (model.*, visual.*, lm_head)
    checkpoint_prefixes = (("model.language_model.", "model."), ("model.visual.", "visual."))
    tower_modules = ("visual.",)

    @classmethod
    def vision_class(cls) -> type:
        from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VisionTransformerPretrainedModel

        return Qwen2VisionTransformerPretrainedModel

    @classmethod
    def check_config(cls, config: Any) -> None:
        text = getattr(config, "text_config", None)
        if text is None:  # the decoder's hooks get the text config; the whole one only comes here first
            return
        if text.model_type != cls.text_model_type:
            raise UnsupportedModelError(
                f"{cls.architecture} with a {text.model_type} text model is not supported "
                f"({cls.text_model_type} only)"
            )
        if config.vision_config.model_type != cls.vision_model_type:
            raise UnsupportedModelError(
                f"{cls.architecture} with a {config.vision_config.model_type} vision tower is not supported "
                f"({cls.vision_model_type} only)"
            )
        section = mrope_section_of(text)
        half = (getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads) // 2
        if len(section) != 3 or sum(section) != half:
            raise UnsupportedModelError(
                f"{cls.architecture}: mrope_section {section} must be three runs summing to head_dim // 2 "
                f"({half})"
            )

    def __init__(
        self,
        config: Any,
        *,
        dtype: torch.dtype | str = torch.float32,
        device: torch.device | str = "cpu",
        linear: Any = None,
    ) -> None:
        text = self.text_config_of(config)
        super().__init__(text, dtype=dtype, device=device, linear=linear)
        self.vl_config = config
        self.text_config = text
        self.image_token_id = config.image_token_id
        self.spatial_merge_size = int(config.vision_config.spatial_merge_size)
        inv_freq, scaling = compute_inv_freq(text)
        self.rotary = MRotaryEmbedding(inv_freq, mrope_section_of(text), scaling).to(self.device)
        # built for real (not on "meta"): the tower's buffers that no checkpoint holds (rotary frequencies)
        with torch.device(self.device):
            self.visual = self.vision_class()(config.vision_config).to(self.dtype)
        for p in self.visual.parameters():
            p.requires_grad_(False)

    # ---- images
    def encode_images(self, pixel_values: torch.Tensor, image_grid_thw: torch.Tensor) -> torch.Tensor:
        """pixel_values [patches, channels * temporal patch * patch * patch] (the processor's flattened
        patches of one image or more) and image_grid_thw [images, 3] -> [placeholder tokens, text hidden]:
        the merged patch embeddings that stand in for the images' placeholders, as transformers'
        `get_image_features` makes them."""
        out = self.visual(pixel_values.to(self.dtype), grid_thw=image_grid_thw.reshape(-1, 3).to(torch.int64))
        return out.pooler_output

    def request_positions(self) -> RequestPositions:
        """Each request's M-RoPE positions, for the runner to keep (see `tgi.core.models.mrope_positions`)."""
        return RequestPositions(self.spatial_merge_size)


class Qwen2_5_VLForConditionalGeneration(Qwen2VLForConditionalGeneration):
    """Qwen2.5-VL: Qwen2-VL's decoder and positions, with Qwen2.5's window-attention vision tower."""

    architecture = "Qwen2_5_VLForConditionalGeneration"
    text_model_type = "qwen2_5_vl_text"
    vision_model_type = "qwen2_5_vl_vision"

    @classmethod
    def vision_class(cls) -> type:
        from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import (
            Qwen2_5_VisionTransformerPretrainedModel,
        )

        return Qwen2_5_VisionTransformerPretrainedModel
