"""LLaVA (`LlavaForConditionalGeneration`): core's Llama decoder, with a CLIP vision tower and a two-layer
projector that turn an image into the embeddings of its placeholder tokens.

The decoder is native (`LlamaForCausalLM` on core's paged attention); the vision tower is transformers' own
`CLIPVisionModel` on the checkpoint's weights (it runs once per image at prefill, outside the KV cache), and
the projector is native. `encode_images` is what the runner calls; the decoder takes the result through
`forward(..., inputs_embeds=...)`.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from tgi.core.models.llama import LlamaForCausalLM
from tgi.core.models.registry import UnsupportedModelError
from tgi.core.models.vision_language import LlavaLayoutDecoder

#: the text models whose checkpoints core's Llama decoder reads as they are
_TEXT_MODEL_TYPES = ("llama", "mistral")
_SELECT_STRATEGIES = ("default", "full")


class LlavaProjector(nn.Module):
    """`multi_modal_projector`: linear_1 -> activation -> linear_2, vision width to text width."""

    def __init__(self, config: Any, dtype: torch.dtype) -> None:
        from transformers.activations import ACT2FN

        super().__init__()
        layers = config.vision_feature_layer
        num_layers = 1 if isinstance(layers, int) else len(layers)
        width, text_width = config.vision_config.hidden_size, config.text_config.hidden_size
        bias = bool(getattr(config, "multimodal_projector_bias", True))
        self.linear_1 = nn.Linear(width * num_layers, text_width, bias=bias, dtype=dtype, device="meta")
        self.act = ACT2FN[config.projector_hidden_act]
        self.linear_2 = nn.Linear(text_width, text_width, bias=bias, dtype=dtype, device="meta")

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.linear_2(self.act(self.linear_1(features)))


class LlavaForConditionalGeneration(LlavaLayoutDecoder, LlamaForCausalLM):
    """LLaVA 1.5: images in, one embedding per placeholder token (`encode_images`); the rest is Llama."""

    architecture = "LlavaForConditionalGeneration"
    takes_images = True  # the runner runs `encode_images` on a request's images at prefill
    display_name = "LLaVA"

    @classmethod
    def check_config(cls, config: Any) -> None:
        text = getattr(config, "text_config", None)
        if text is None:  # the decoder's hooks get the text config; the whole one only comes here first
            return
        if text.model_type not in _TEXT_MODEL_TYPES:
            raise UnsupportedModelError(
                f"LLaVA with a {text.model_type} text model is not supported natively "
                f"(supported: {', '.join(_TEXT_MODEL_TYPES)})"
            )
        if config.vision_config.model_type != "clip_vision_model":
            raise UnsupportedModelError(
                f"LLaVA with a {config.vision_config.model_type} vision tower is not supported (CLIP only)"
            )
        if config.vision_feature_select_strategy not in _SELECT_STRATEGIES:
            raise UnsupportedModelError(
                f"LLaVA vision_feature_select_strategy {config.vision_feature_select_strategy!r} is not "
                f"supported ({', '.join(_SELECT_STRATEGIES)})"
            )

    def __init__(
        self,
        config: Any,
        *,
        dtype: torch.dtype | str = torch.float32,
        device: torch.device | str = "cpu",
        linear: Any = None,
    ) -> None:
        from transformers import CLIPVisionModel

        super().__init__(self.text_config_of(config), dtype=dtype, device=device, linear=linear)
        self.llava_config = config
        self.text_config = config.text_config
        self.image_token_id = getattr(config, "image_token_id", None) or config.image_token_index
        # built for real (not on "meta"): the tower's buffers that no checkpoint holds (position ids) are set
        with torch.device(self.device):
            self.vision_tower = CLIPVisionModel(config.vision_config).to(self.dtype)
        self.multi_modal_projector = LlavaProjector(config, self.dtype)
        self.multi_modal_projector.to_empty(device=self.device)
        for module in (self.vision_tower, self.multi_modal_projector):
            for p in module.parameters():
                p.requires_grad_(False)

    # ---- images
    def encode_images(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """pixel_values [N, 3, H, W] (the processor's) -> [N, tokens per image, text hidden]: the embeddings
        that stand in for each image's placeholder tokens, as transformers' `get_image_features` makes them."""
        config = self.llava_config
        out = self.vision_tower(pixel_values.to(self.dtype), output_hidden_states=True, return_dict=True)
        layers = config.vision_feature_layer
        pool = (
            [out.hidden_states[layers]] if isinstance(layers, int) else [out.hidden_states[i] for i in layers]
        )
        if config.vision_feature_select_strategy == "default":
            pool = [h[:, 1:] for h in pool]  # CLIP's class token has no placeholder
        return self.multi_modal_projector(torch.cat(pool, dim=-1))
