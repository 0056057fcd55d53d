"""LLaVA-NeXT (`LlavaNextForConditionalGeneration`, "anyres"): LLaVA whose image is fitted into one of the
checkpoint's `image_grid_pinpoints`, cut into crops of the tower's size and encoded with the whole image
shrunk to one crop; the crops' features are packed back into the image's grid, unpadded to its original
aspect ratio and closed by `image_newline` at each row's end, so that an image's number of placeholder tokens
depends on its size.

The decoder is core's Llama, the tower and projector those of LLaVA (`tgi.core.models.llava`); the packing
is transformers' own (`LlavaNextModel.get_image_features` and `pack_image_features`, run on this model's
modules and the checkpoint's `image_newline`): nothing of their resizing or unpadding is written here. Each
image's original `(height, width)` comes from the processor as `ImageInput.extras["image_sizes"]`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tgi.core.models.llava import LlavaForConditionalGeneration

SIZES_KEY = "image_sizes"


class _ImageSide:
    """What transformers' `LlavaNextModel.get_image_features` reads of its model: its config, vision tower,
    projector and `image_newline`, and its `pack_image_features` (both borrowed as methods)."""

    def __init__(self, config: Any, vision_tower: nn.Module, projector: nn.Module, newline: nn.Parameter):
        from transformers.models.llava_next.modeling_llava_next import LlavaNextModel

        self.config = config
        self.vision_tower = vision_tower
        self.multi_modal_projector = projector
        self.image_newline = newline
        self._features = LlavaNextModel.get_image_features.__get__(self)
        self.pack_image_features = LlavaNextModel.pack_image_features.__get__(self)

    def features(self, pixel_values: torch.Tensor, image_sizes: torch.Tensor) -> torch.Tensor:
        return torch.cat(self._features(pixel_values, image_sizes).pooler_output, dim=0)


class LlavaNextForConditionalGeneration(LlavaForConditionalGeneration):
    """LLaVA-NeXT: images in (their crops and original sizes), one embedding per placeholder token."""

    architecture = "LlavaNextForConditionalGeneration"
    image_extras = (SIZES_KEY,)  # the `ImageInput.extras` `encode_images` takes, as keyword tensors
    # weights: LLaVA's two layouts, with `image_newline` at the top (`model.image_newline` in transformers 5's)
    checkpoint_prefixes = (
        ("model.image_newline", "image_newline"),
        *LlavaForConditionalGeneration.checkpoint_prefixes,
    )
    tower_modules = (*LlavaForConditionalGeneration.tower_modules, "image_newline")

    def __init__(
        self,
        config: Any,
        *,
        dtype: torch.dtype | str = torch.float32,
        device: torch.device | str = "cpu",
        linear: Any = None,
    ) -> None:
        super().__init__(config, dtype=dtype, device=device, linear=linear)
        width = config.text_config.hidden_size
        self.image_newline = nn.Parameter(
            torch.empty(width, dtype=self.dtype, device=self.device), requires_grad=False
        )

    def encode_images(self, pixel_values: torch.Tensor, image_sizes: torch.Tensor) -> torch.Tensor:
        """pixel_values [images, crops, 3, H, W] (the processor's, padded to the most crops of its batch)
        and image_sizes [images, 2] (each image's original height and width) -> [placeholder tokens, text
        hidden]: the packed features that stand in for the images' placeholders, as transformers'
        `get_image_features` makes them."""
        side = _ImageSide(
            self.llava_config, self.vision_tower, self.multi_modal_projector, self.image_newline
        )
        if pixel_values.dim() == 4:  # one image's crops
            pixel_values = pixel_values.unsqueeze(0)
        return side.features(pixel_values.to(self.dtype), image_sizes.reshape(-1, 2).to(torch.int64))
