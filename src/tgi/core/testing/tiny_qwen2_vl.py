"""Random-weight Qwen2-VL and Qwen2.5-VL checkpoints with their real processor (`Qwen2VLProcessor`: the
Qwen2-VL image processor with small pixel bounds, a word-level tokenizer holding Qwen's vision tokens, a chat
template that renders image parts as `<|vision_start|><|image_pad|><|vision_end|>`), for tests of M-RoPE
image requests end to end. Nothing is read from the hub."""

from __future__ import annotations

from pathlib import Path

IMAGE_TOKEN = "<|image_pad|>"
VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", IMAGE_TOKEN, "<|video_pad|>")
#: patches of 14 pixels merged 2 x 2: one placeholder token per 28 x 28 pixels
PIXELS_PER_TOKEN = 28 * 28

CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }} : "
    "{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for p in m['content'] %}"
    "{% if p['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|> {% else %}{{ p['text'] }} "
    "{% endif %}{% endfor %}{% endif %}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant : {% endif %}"
)


def save_qwen2_vl_processor(
    folder: Path | str, *, vocab_size: int = 250, min_tokens: int = 4, max_tokens: int = 16
) -> Path:
    """Save a `Qwen2VLProcessor` to `folder` (returned): images resized to between `min_tokens` and
    `max_tokens` placeholder tokens (28 x 28 pixels each, the aspect ratio kept), and a word-level tokenizer
    of `vocab_size` words (`<unk>`=0, `</s>`=1, `w2`...; the four vision tokens are the last ids, the image
    placeholder `<|image_pad|>` at `vocab_size - 2`)."""
    import json

    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import PreTrainedTokenizerFast, Qwen2VLImageProcessor

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    words = vocab_size - len(VISION_TOKENS)
    vocab = {"<unk>": 0, "</s>": 1, **{f"w{i}": i for i in range(2, words)}}
    vocab.update({token: words + i for i, token in enumerate(VISION_TOKENS)})
    backend = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="</s>", unk_token="<unk>")
    tokenizer.add_special_tokens({"additional_special_tokens": list(VISION_TOKENS)})
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)
    size = {"shortest_edge": min_tokens * PIXELS_PER_TOKEN, "longest_edge": max_tokens * PIXELS_PER_TOKEN}
    Qwen2VLImageProcessor(size=size, patch_size=14, merge_size=2, temporal_patch_size=2).save_pretrained(
        folder
    )
    # the processor's own files, written as `Qwen2VLProcessor.save_pretrained` writes them: that one cannot
    # be built here without its video processor, which needs torchvision (not installed; videos are not
    # served). `tgi.server.images.processor.load_processor` loads the folder with or without torchvision.
    (folder / "processor_config.json").write_text(json.dumps({"processor_class": "Qwen2VLProcessor"}))
    (folder / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    return folder


def save_random_qwen2_vl(
    folder: Path | str,
    *,
    version: str = "2",
    vocab_size: int = 250,
    hidden_size: int = 64,
    num_layers: int = 2,
    vision_hidden_size: int = 32,
    vision_layers: int = 2,
    dtype: str = "float32",
    seed: int = 0,
) -> Path:
    """Save a randomly initialised `Qwen2VLForConditionalGeneration` (`version="2"`) or
    `Qwen2_5_VLForConditionalGeneration` (`version="2.5"`: window attention in the tower, its first layer
    windowed and its last full) with its processor (`save_qwen2_vl_processor`) to `folder`. The decoder has
    4 heads of 16 dims (2 key/value heads), mrope_section [2, 3, 3]."""
    import torch
    import transformers

    if version not in ("2", "2.5"):
        raise ValueError(f"version {version!r}: '2' or '2.5'")
    text = dict(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        # a small theta and large weights: the tokens depend on the positions (a test sees wrong ones)
        rope_parameters={"rope_type": "default", "rope_theta": 100.0, "mrope_section": [2, 3, 3]},
        initializer_range=0.2,
        bos_token_id=0,
        eos_token_id=1,
    )
    vision = dict(
        depth=vision_layers, num_heads=2, patch_size=14, spatial_merge_size=2, temporal_patch_size=2
    )
    if version == "2":
        vision |= dict(embed_dim=vision_hidden_size, hidden_size=hidden_size, mlp_ratio=2)
        config_class, model_class = transformers.Qwen2VLConfig, transformers.Qwen2VLForConditionalGeneration
    else:
        vision |= dict(
            hidden_size=vision_hidden_size,
            intermediate_size=2 * vision_hidden_size,
            out_hidden_size=hidden_size,
            window_size=56,  # 2 x 2 merged tokens a window
            fullatt_block_indexes=[vision_layers - 1],
        )
        config_class = transformers.Qwen2_5_VLConfig
        model_class = transformers.Qwen2_5_VLForConditionalGeneration
    words = vocab_size - len(VISION_TOKENS)
    config = config_class(
        text_config=text,
        vision_config=vision,
        vision_start_token_id=words,
        vision_end_token_id=words + 1,
        image_token_id=words + 2,
        video_token_id=words + 3,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = model_class(config)
    model.to(getattr(torch, dtype)).save_pretrained(folder, safe_serialization=True)
    return save_qwen2_vl_processor(folder, vocab_size=vocab_size)
