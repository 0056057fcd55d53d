"""Gemma 3 with images (`Gemma3ForConditionalGeneration`): core's Gemma 3 decoder, transformers' SigLIP tower
and `Gemma3MultiModalProjector` (average pooling to `mm_tokens_per_image`, RMS norm, projection) on the
checkpoint's weights.

An image's placeholder tokens attend to each other both ways at prefill (transformers' mask from
`token_type_ids`); text stays causal. The model says so (`bidirectional_images`): the runner gives each
prefill chunk its images' spans (`AttentionMetadata.prefill_bidirectional_spans`), refuses an attention that
cannot mask them, and the scheduler never splits an image across chunks or a cached prefix
(`RunnerConstraints.atomic_images`). Decodes are plain causal.
"""

from __future__ import annotations

from typing import Any

import torch

from tgi.core.models.gemma3 import Gemma3ForCausalLM
from tgi.core.models.registry import UnsupportedModelError
from tgi.core.models.vision_language import LlavaLayoutDecoder


class Gemma3ForConditionalGeneration(LlavaLayoutDecoder, Gemma3ForCausalLM):
    architecture = "Gemma3ForConditionalGeneration"
    takes_images = True  # the runner runs `encode_images` on a request's images at prefill
    bidirectional_images = True  # an image's tokens attend to each other both ways at prefill
    display_name = "Gemma 3"

    @classmethod
    def check_config(cls, config: Any) -> None:
        text = getattr(config, "text_config", None)
        if text is None:  # the decoder's hooks get the text config
            return super().check_config(config)
        if config.vision_config.model_type != "siglip_vision_model":
            raise UnsupportedModelError(
                f"Gemma 3 with a {config.vision_config.model_type} vision tower is not supported (SigLIP only)"
            )
        super().check_config(text)

    def __init__(
        self,
        config: Any,
        *,
        dtype: torch.dtype | str = torch.float32,
        device: torch.device | str = "cpu",
        linear: Any = None,
    ) -> None:
        from transformers import SiglipVisionModel
        from transformers.models.gemma3.modeling_gemma3 import Gemma3MultiModalProjector

        super().__init__(config.text_config, dtype=dtype, device=device, linear=linear)
        self.vl_config = config
        self.text_config = config.text_config
        # built for real (not on "meta"): the tower's buffers that no checkpoint holds (position ids) are set
        with torch.device(self.device):
            self.vision_tower = SiglipVisionModel(config.vision_config).to(self.dtype)
            self.multi_modal_projector = Gemma3MultiModalProjector(config).to(self.dtype)
        for module in (self.vision_tower, self.multi_modal_projector):
            for p in module.parameters():
                p.requires_grad_(False)

    def encode_images(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """pixel_values [N, 3, H, W] -> [N, mm_tokens_per_image, text hidden], as transformers'
        `get_image_features` makes them."""
        hidden = self.vision_tower(
            pixel_values=pixel_values.to(self.dtype), return_dict=True
        ).last_hidden_state
        return self.multi_modal_projector(hidden)
