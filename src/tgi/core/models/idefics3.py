"""Idefics3 and SmolVLM (`Idefics3ForConditionalGeneration`): core's Llama decoder, with transformers' own
Idefics3 vision tower and connector (pixel shuffle, then a linear projection) on the checkpoint's weights.

The processor cuts an image into tiles (a grid of `max_image_size` tiles and the whole image shrunk to one,
with `<row_r_col_c>` and `<global-img>` text between their runs of placeholders); the tower encodes each tile
alone, so the server hands each tile to the engine as its own `ImageInput` (its pixels and its
`pixel_attention_mask`, which marks the padding of a tile smaller than the tower's input) and
`encode_images` turns one or more tiles into the embeddings of their placeholders, as transformers'
`get_image_features` does for the tiles of a batch.
"""

from __future__ import annotations

from typing import Any

import torch

from tgi.core.models.llama import LlamaForCausalLM
from tgi.core.models.registry import UnsupportedModelError
from tgi.core.models.vision_language import VisionLanguageDecoder

#: the text models whose checkpoints core's Llama decoder reads as they are
_TEXT_MODEL_TYPES = ("llama",)
MASK_KEY = "pixel_attention_mask"


class Idefics3ForConditionalGeneration(VisionLanguageDecoder, LlamaForCausalLM):
    """Idefics3 / SmolVLM: image tiles in (`encode_images`, one embedding per placeholder token); the rest
    is Llama."""

    architecture = "Idefics3ForConditionalGeneration"
    takes_images = True  # the runner runs `encode_images` on a request's images at prefill
    image_extras = (MASK_KEY,)  # the `ImageInput.extras` `encode_images` takes, as keyword tensors
    ties_head_by_outer_config = True
    # weights: transformers' layout (model.text_model.*, model.vision_model.*, model.connector.*, lm_head)
    checkpoint_prefixes = (
        ("model.text_model.", "model."),
        ("model.vision_model.", "vision_model."),
        ("model.connector.", "connector."),
    )
    tower_modules = ("vision_model.", "connector.")

    @classmethod
    def check_config(cls, config: Any) -> None:
        text = getattr(config, "text_config", None)
        if text is None:  # the decoder's hooks get the text config; the whole one only comes here first
            return
        if text.model_type not in _TEXT_MODEL_TYPES:
            raise UnsupportedModelError(
                f"{cls.architecture} with a {text.model_type} text model is not supported natively "
                f"(supported: {', '.join(_TEXT_MODEL_TYPES)})"
            )
        if config.vision_config.model_type != "idefics3_vision":
            raise UnsupportedModelError(
                f"{cls.architecture} with a {config.vision_config.model_type} vision tower is not supported "
                "(idefics3_vision only)"
            )

    def __init__(
        self,
        config: Any,
        *,
        dtype: torch.dtype | str = torch.float32,
        device: torch.device | str = "cpu",
        linear: Any = None,
    ) -> None:
        from transformers.models.idefics3.modeling_idefics3 import (
            Idefics3Connector,
            Idefics3VisionTransformer,
        )

        text = self.text_config_of(config)
        super().__init__(text, dtype=dtype, device=device, linear=linear)
        self.vl_config = config
        self.text_config = text
        self.image_token_id = config.image_token_id
        self.patch_size = int(config.vision_config.patch_size)
        # built for real (not on "meta"): the tower's buffers that no checkpoint holds (position ids)
        with torch.device(self.device):
            self.vision_model = Idefics3VisionTransformer(config.vision_config).to(self.dtype)
            self.connector = Idefics3Connector(config).to(self.dtype)
        for module in (self.vision_model, self.connector):
            for p in module.parameters():
                p.requires_grad_(False)

    # ---- images
    def encode_images(
        self, pixel_values: torch.Tensor, pixel_attention_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        """pixel_values [N, 3, H, W] (N tiles, the processor's) and pixel_attention_mask [N, H, W] (where
        the pixels are the tile's, not padding) -> [N, placeholders per tile, text hidden]: the embeddings
        that stand in for each tile's placeholders, as transformers' `get_image_features` makes them."""
        pixels = pixel_values.to(self.dtype)
        if pixel_attention_mask is None:
            pixel_attention_mask = torch.ones(
                (pixels.shape[0], *pixels.shape[2:]), dtype=torch.bool, device=pixels.device
            )
        p = self.patch_size
        subgrid = pixel_attention_mask.reshape(-1, *pixels.shape[2:]).unfold(1, p, p).unfold(2, p, p)
        patch_mask = subgrid.sum(dim=(-1, -2)) > 0  # [N, H / p, W / p]: a patch with any real pixel
        out = self.vision_model(pixel_values=pixels, patch_attention_mask=patch_mask, return_dict=True)
        return self.connector(out.last_hidden_state)
