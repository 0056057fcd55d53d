"""A random-weight LLaVA checkpoint with its processor (CLIP image processor, a word-level tokenizer with an
`<image>` token, a chat template that renders image parts), for tests of image requests end to end."""

from __future__ import annotations

from pathlib import Path
from typing import Any

IMAGE_TOKEN = "<image>"

# Renders OpenAI-shaped messages whose `content` is a string or a list of parts ({"type": "text"} /
# {"type": "image"}): an image part is the processor's `<image>` token, which the processor expands.
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }} : "
    "{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for p in m['content'] %}"
    "{% if p['type'] == 'image' %}<image> {% else %}{{ p['text'] }} {% endif %}"
    "{% endfor %}{% endif %}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant : {% endif %}"
)


def save_llava_processor(folder: Path | str, *, vocab_size: int = 250, image_size: int = 28) -> Path:
    """Save a `LlavaProcessor` to `folder` (returned): a CLIP image processor resizing to `image_size`
    square, patches of 14 (so `(image_size // 14) ** 2` placeholder tokens per image), and a word-level
    tokenizer of `vocab_size` words (`<unk>`=0, `</s>`=1, `w2`...; `<image>` is the last id)."""
    from transformers import CLIPImageProcessor, LlavaProcessor

    images = CLIPImageProcessor(
        size={"shortest_edge": image_size},
        crop_size={"height": image_size, "width": image_size},
    )
    return save_clip_processor(folder, LlavaProcessor, images, vocab_size=vocab_size)


def save_clip_processor(folder: Path | str, processor_class: type, images: Any, *, vocab_size: int) -> Path:
    """Save a LLaVA-style `processor_class` (`LlavaProcessor`, `LlavaNextProcessor`) on image processor
    `images` to `folder` (returned): CLIP's patches of 14 and its class token dropped (the "default"
    strategy), the word-level tokenizer of `vocab_size` words (`<unk>`=0, `</s>`=1, `w2`...; `<image>` is the
    last id) and `CHAT_TEMPLATE`."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast

    folder = Path(folder)
    vocab = {"<unk>": 0, "</s>": 1, **{f"w{i}": i for i in range(2, vocab_size - 1)}}
    vocab[IMAGE_TOKEN] = vocab_size - 1
    backend = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="</s>", unk_token="<unk>")
    tokenizer.add_special_tokens({"additional_special_tokens": [IMAGE_TOKEN]})
    tokenizer.chat_template = CHAT_TEMPLATE
    processor = processor_class(
        image_processor=images,
        tokenizer=tokenizer,
        patch_size=14,
        vision_feature_select_strategy="default",
        num_additional_image_tokens=1,  # CLIP's class token, which the "default" strategy drops
        chat_template=CHAT_TEMPLATE,
    )
    processor.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def llava_configs(
    *,
    vocab_size: int,
    image_size: int,
    hidden_size: int,
    num_layers: int,
    vision_hidden_size: int,
    vision_layers: int,
    **text_settings: Any,
) -> tuple[Any, Any]:
    """The text config (a tiny Llama of `core.testing.tiny_models`' shape; `text_settings` added) and the
    vision config (a tiny CLIP tower on `image_size` pixels, patches of 14) of a random LLaVA."""
    from transformers import CLIPVisionConfig, LlamaConfig

    text = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=0,
        eos_token_id=1,
        **text_settings,
    )
    vision = CLIPVisionConfig(
        image_size=image_size,
        patch_size=14,
        hidden_size=vision_hidden_size,
        intermediate_size=2 * vision_hidden_size,
        num_hidden_layers=vision_layers,
        num_attention_heads=2,
        projection_dim=vision_hidden_size,
    )
    return text, vision


def save_random_weights(model_class: type, config: Any, folder: Path | str, *, dtype: str, seed: int) -> None:
    """Save `model_class(config)`, initialised from `seed`, in `dtype` as safetensors to `folder`."""
    import torch

    torch.manual_seed(seed)
    model = model_class(config)
    model.to(getattr(torch, dtype)).save_pretrained(folder, safe_serialization=True)


def save_random_llava(
    folder: Path | str,
    *,
    vocab_size: int = 250,
    image_size: int = 28,
    hidden_size: int = 64,
    num_layers: int = 2,
    vision_hidden_size: int = 32,
    vision_layers: int = 1,
    dtype: str = "float32",
    seed: int = 0,
) -> Path:
    """Save a randomly initialised `LlavaForConditionalGeneration` (a tiny CLIP vision tower, a tiny Llama
    of `core.testing.tiny_models`' shape) with its processor (`save_llava_processor`) to `folder`."""
    from transformers import LlavaConfig, LlavaForConditionalGeneration

    text, vision = llava_configs(
        vocab_size=vocab_size, image_size=image_size, hidden_size=hidden_size, num_layers=num_layers,
        vision_hidden_size=vision_hidden_size, vision_layers=vision_layers,
    )  # fmt: skip
    config = LlavaConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=vocab_size - 1,
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
    )
    save_random_weights(LlavaForConditionalGeneration, config, folder, dtype=dtype, seed=seed)
    return save_llava_processor(folder, vocab_size=vocab_size, image_size=image_size)
