"""A random-weight Gemma 3 with images (`Gemma3ForConditionalGeneration`: a tiny SigLIP tower, the projector,
a tiny Gemma 3 decoder) with its real processor (`Gemma3Processor`: the Gemma 3 image processor at 56 x 56
pixels, a word-level tokenizer holding Gemma 3's image tokens, a chat template that renders image parts as
`<start_of_image>`), for tests of image requests. Nothing is read from the hub."""

from __future__ import annotations

from pathlib import Path

BOI, EOI, IMAGE_TOKEN = "<start_of_image>", "<end_of_image>", "<image_soft_token>"
#: 56-pixel images in patches of 14 (4 x 4), pooled 2 x 2: 4 placeholder tokens per image
IMAGE_SIZE = 56
TOKENS_PER_IMAGE = 4

CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }} : "
    "{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for p in m['content'] %}"
    "{% if p['type'] == 'image' %}<start_of_image> {% else %}{{ p['text'] }} {% endif %}"
    "{% endfor %}{% endif %}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant : {% endif %}"
)


def save_gemma3_processor(folder: Path | str, *, vocab_size: int = 250) -> Path:
    """Save a `Gemma3Processor` to `folder` (returned): images resized to `IMAGE_SIZE` square, each expanded
    to `<start_of_image>`, `TOKENS_PER_IMAGE` x `<image_soft_token>`, `<end_of_image>`; a word-level tokenizer
    of `vocab_size` words (`<unk>`=0, `</s>`=1, `w2`...; the three image tokens are the last ids, in that
    order)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import Gemma3ImageProcessor, Gemma3Processor, PreTrainedTokenizerFast

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    specials = (BOI, EOI, IMAGE_TOKEN)
    words = vocab_size - len(specials)
    vocab = {"<unk>": 0, "</s>": 1, **{f"w{i}": i for i in range(2, words)}}
    vocab.update({token: words + i for i, token in enumerate(specials)})
    backend = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend, eos_token="</s>", unk_token="<unk>",
        extra_special_tokens={"boi_token": BOI, "eoi_token": EOI, "image_token": IMAGE_TOKEN},
    )  # fmt: skip
    tokenizer.chat_template = CHAT_TEMPLATE
    images = Gemma3ImageProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    processor = Gemma3Processor(
        image_processor=images,
        tokenizer=tokenizer,
        image_seq_length=TOKENS_PER_IMAGE,
        chat_template=CHAT_TEMPLATE,
    )
    processor.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def save_random_gemma3(
    folder: Path | str,
    *,
    vocab_size: int = 250,
    hidden_size: int = 64,
    num_layers: int = 2,
    sliding_window: int = 6,
    dtype: str = "float32",
    seed: int = 0,
) -> Path:
    """Save a randomly initialised `Gemma3ForConditionalGeneration` (a one-layer SigLIP tower, a Gemma 3
    decoder whose first layer has a sliding window of `sliding_window`) with its processor
    (`save_gemma3_processor`) to `folder`. Weights are redrawn larger than transformers' init (norms around
    1, matrices N(0, 0.08)), so that the image tokens' mask shows in the greedy tokens."""
    import torch
    from transformers import (
        Gemma3Config,
        Gemma3ForConditionalGeneration,
        Gemma3TextConfig,
        SiglipVisionConfig,
    )

    words = vocab_size - 3
    text = Gemma3TextConfig(
        vocab_size=vocab_size, hidden_size=hidden_size, intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        max_position_embeddings=512, sliding_window=sliding_window,
        layer_types=["sliding_attention", "full_attention"] * (num_layers // 2) + ["sliding_attention"] * (num_layers % 2),
        bos_token_id=0, eos_token_id=1, pad_token_id=0,
    )  # fmt: skip
    vision = SiglipVisionConfig(
        image_size=IMAGE_SIZE, patch_size=14, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2,
    )  # fmt: skip
    config = Gemma3Config(
        text_config=text, vision_config=vision, mm_tokens_per_image=TOKENS_PER_IMAGE,
        boi_token_index=words, eoi_token_index=words + 1, image_token_index=words + 2,
    )  # fmt: skip
    torch.manual_seed(seed)
    model = Gemma3ForConditionalGeneration(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(-0.5, 0.5)  # Gemma's norms scale by 1 + w
            elif p.dim() > 1:
                p.normal_(0.0, 0.08)
    model.to(getattr(torch, dtype)).save_pretrained(folder, safe_serialization=True)
    return save_gemma3_processor(folder, vocab_size=vocab_size)
