"""A random-weight LLaVA-NeXT checkpoint with its real processor (`LlavaNextProcessor`: the LLaVA-NeXT image
processor on 28-pixel crops and small `image_grid_pinpoints`, a word-level tokenizer with an `<image>` token,
a chat template that renders image parts), for tests of anyres image requests end to end: an image's number
of placeholder tokens depends on its size. Nothing is read from the hub."""

from __future__ import annotations

from pathlib import Path

from tgi.core.testing.tiny_vlm import CHAT_TEMPLATE, IMAGE_TOKEN

#: the vision tower's input: crops of 28 x 28 pixels, patches of 14 (4 tokens a crop with CLIP's class
#: token dropped)
CROP = 28
#: the resolutions an image is fitted into before it is cut into crops (plus the whole image as one crop)
GRID_PINPOINTS = [[28, 56], [56, 28], [56, 56]]


def save_llava_next_processor(folder: Path | str, *, vocab_size: int = 250) -> Path:
    """Save a `LlavaNextProcessor` to `folder` (returned): images fitted into one of `GRID_PINPOINTS`, cut
    into `CROP`-pixel crops, and a word-level tokenizer of `vocab_size` words (`<unk>`=0, `</s>`=1,
    `w2`...; `<image>` is the last id)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import LlavaNextImageProcessorPil, LlavaNextProcessor, PreTrainedTokenizerFast

    folder = Path(folder)
    vocab = {"<unk>": 0, "</s>": 1, **{f"w{i}": i for i in range(2, vocab_size - 1)}}
    vocab[IMAGE_TOKEN] = vocab_size - 1
    backend = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="</s>", unk_token="<unk>")
    tokenizer.add_special_tokens({"additional_special_tokens": [IMAGE_TOKEN]})
    tokenizer.chat_template = CHAT_TEMPLATE
    images = LlavaNextImageProcessorPil(
        size={"shortest_edge": CROP},
        crop_size={"height": CROP, "width": CROP},
        image_grid_pinpoints=GRID_PINPOINTS,
    )
    processor = LlavaNextProcessor(
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


def save_random_llava_next(
    folder: Path | str,
    *,
    vocab_size: int = 250,
    hidden_size: int = 64,
    num_layers: int = 2,
    vision_hidden_size: int = 32,
    vision_layers: int = 1,
    dtype: str = "float32",
    seed: int = 0,
) -> Path:
    """Save a randomly initialised `LlavaNextForConditionalGeneration` (a tiny CLIP vision tower on `CROP`
    pixels, a tiny Llama) with its processor (`save_llava_next_processor`) to `folder`."""
    import torch
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaNextConfig, LlavaNextForConditionalGeneration

    text = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=8,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=0.2,
        bos_token_id=0,
        eos_token_id=1,
    )
    vision = CLIPVisionConfig(
        image_size=CROP,
        patch_size=14,
        hidden_size=vision_hidden_size,
        intermediate_size=2 * vision_hidden_size,
        num_hidden_layers=vision_layers,
        num_attention_heads=2,
        projection_dim=vision_hidden_size,
    )
    config = LlavaNextConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=vocab_size - 1,
        image_grid_pinpoints=GRID_PINPOINTS,
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = LlavaNextForConditionalGeneration(config)
    model.to(getattr(torch, dtype)).save_pretrained(folder, safe_serialization=True)
    return save_llava_next_processor(folder, vocab_size=vocab_size)
