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

from tgi.core.interfaces.types import AttentionLayerSpec
from tgi.core.models.gemma3 import Gemma3ForCausalLM
from tgi.core.models.registry import UnsupportedModelError


class Gemma3ForConditionalGeneration(Gemma3ForCausalLM):
    architecture = "Gemma3ForConditionalGeneration"
    takes_images = True  # the runner runs `encode_images` on a request's images at prefill
    bidirectional_images = True  # an image's tokens attend to each other both ways at prefill

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

    @classmethod
    def attention_layer_specs(cls, config: Any, tp_size: int = 1) -> list[AttentionLayerSpec]:
        cls.check_config(config)
        if tp_size > 1 and hasattr(config, "vision_config"):
            raise UnsupportedModelError("Gemma 3's vision tower does not run under tensor parallelism")
        return super().attention_layer_specs(getattr(config, "text_config", config), tp_size)

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

    # ---- weights: as transformers 5 saves them (language_model.model.*, vision_tower.*, multi_modal_projector.*)
    # and its module layout (model.language_model.*, model.vision_tower.vision_model.*, lm_head)
    @staticmethod
    def _local_name(name: str) -> str:
        for prefix, local in (
            ("model.language_model.", "model."),
            ("language_model.model.", "model."),
            ("language_model.lm_head.", "lm_head."),
            ("model.vision_tower.", "vision_tower."),
            ("model.multi_modal_projector.", "multi_modal_projector."),
        ):
            if name.startswith(prefix):
                name = local + name[len(prefix) :]
                break
        return name.replace("vision_tower.vision_model.", "vision_tower.")

    def skip_weight(self, name: str) -> bool:
        return super().skip_weight(self._local_name(name))

    def checkpoint_parts(self, name: str, tensor: torch.Tensor) -> list[tuple[str, object, torch.Tensor]]:
        local = self._local_name(name)
        if local.startswith(("vision_tower.", "multi_modal_projector.")):
            return [(local, None, tensor)]  # transformers' modules: no fused q/k/v
        return super().checkpoint_parts(local, tensor)

    def checkpoint_target(self, name: str) -> tuple[str, object]:
        local = self._local_name(name)
        if local.startswith(("vision_tower.", "multi_modal_projector.")):
            return local, None
        return super().checkpoint_target(local)
