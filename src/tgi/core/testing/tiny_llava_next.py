"""A random-weight LLaVA-NeXT checkpoint with its real processor (`LlavaNextProcessor`: the LLaVA-NeXT image
processor on 28-pixel crops and small `image_grid_pinpoints`, a word-level tokenizer with an `<image>` token,
a chat template that renders image parts), for tests of anyres image requests end to end: an image's number
of placeholder tokens depends on its size. Nothing is read from the hub."""

from __future__ import annotations

from pathlib import Path

from tgi.core.testing.tiny_vlm import llava_configs, save_clip_processor, save_random_weights

#: the vision tower's input: crops of 28 x 28 pixels, patches of 14 (4 tokens a crop with CLIP's class
#: token dropped)
CROP = 28
#: the resolutions an image is fitted into before it is cut into crops (plus the whole image as one crop)
GRID_PINPOINTS = [[28, 56], [56, 28], [56, 56]]


def save_llava_next_processor(folder: Path | str, *, vocab_size: int = 250) -> Path:
    """Save a `LlavaNextProcessor` to `folder` (returned): images fitted into one of `GRID_PINPOINTS`, cut
    into `CROP`-pixel crops, and a word-level tokenizer of `vocab_size` words (`<unk>`=0, `</s>`=1,
    `w2`...; `<image>` is the last id)."""
    from transformers import LlavaNextImageProcessorPil, LlavaNextProcessor

    images = LlavaNextImageProcessorPil(
        size={"shortest_edge": CROP},
        crop_size={"height": CROP, "width": CROP},
        image_grid_pinpoints=GRID_PINPOINTS,
    )
    return save_clip_processor(folder, LlavaNextProcessor, images, vocab_size=vocab_size)


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
    from transformers import LlavaNextConfig, LlavaNextForConditionalGeneration

    text, vision = llava_configs(
        vocab_size=vocab_size, image_size=CROP, hidden_size=hidden_size, num_layers=num_layers,
        vision_hidden_size=vision_hidden_size, vision_layers=vision_layers, initializer_range=0.2,
    )  # fmt: skip
    config = LlavaNextConfig(
        vision_config=vision,
        text_config=text,
        image_token_index=vocab_size - 1,
        image_grid_pinpoints=GRID_PINPOINTS,
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
        tie_word_embeddings=False,
    )
    save_random_weights(LlavaNextForConditionalGeneration, config, folder, dtype=dtype, seed=seed)
    return save_llava_next_processor(folder, vocab_size=vocab_size)
