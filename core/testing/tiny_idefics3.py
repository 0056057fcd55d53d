"""A random-weight Idefics3 (SmolVLM) checkpoint with its real processor (`Idefics3Processor`: the Idefics3
image processor with small tiles, a word-level tokenizer holding Idefics3's image, tile and global-image
tokens, a chat template that renders image parts as `<image>`), for tests of tiled image requests end to
end. Nothing is read from the hub."""

from __future__ import annotations

from pathlib import Path

IMAGE_TOKEN = "<image>"
#: the processor's own tokens around an image's runs of placeholders: one `<row_r_col_c>` per tile
IMAGE_TOKENS = (
    "<fake_token_around_image>",
    IMAGE_TOKEN,
    "<end_of_utterance>",
    "<global-img>",
    *(f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)),
)
#: tiles of 56 x 56 pixels, patches of 14, shuffled 2 x 2: 4 placeholder tokens per tile
TILE = 56
TOKENS_PER_TILE = 4

CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }} : "
    "{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for p in m['content'] %}"
    "{% if p['type'] == 'image' %}<image> {% else %}{{ p['text'] }} {% endif %}"
    "{% endfor %}{% endif %}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant : {% endif %}"
)


def save_idefics3_processor(
    folder: Path | str, *, vocab_size: int = 250, longest_edge: int = 2 * TILE, splitting: bool = True
) -> Path:
    """Save an `Idefics3Processor` to `folder` (returned): images resized to at most `longest_edge` pixels a
    side and, with `splitting`, cut into tiles of `TILE` pixels plus the whole image shrunk to one tile (each
    tile `TOKENS_PER_TILE` placeholder tokens); a word-level tokenizer of `vocab_size` words (`<unk>`=0,
    `</s>`=1, `\\n`=2, `w3`...; Idefics3's image tokens are the last ids, `<image>` at `vocab_size -
    len(IMAGE_TOKENS) + 1`)."""
    from tokenizers import Regex, Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Sequence, Split
    from transformers import Idefics3ImageProcessorPil, Idefics3Processor, PreTrainedTokenizerFast

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    words = vocab_size - len(IMAGE_TOKENS)
    vocab = {"<unk>": 0, "</s>": 1, "\n": 2, **{f"w{i}": i for i in range(3, words)}}
    vocab.update({token: words + i for i, token in enumerate(IMAGE_TOKENS)})
    backend = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    # words split at spaces; a newline is a word of its own (the processor writes one after each tile row)
    backend.pre_tokenizer = Sequence([Split(" ", "removed"), Split(Regex("\n"), "isolated")])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="</s>", unk_token="<unk>")
    tokenizer.add_special_tokens({"additional_special_tokens": list(IMAGE_TOKENS)})
    tokenizer.chat_template = CHAT_TEMPLATE
    images = Idefics3ImageProcessorPil(
        size={"longest_edge": longest_edge},
        max_image_size={"longest_edge": TILE},
        do_image_splitting=splitting,
    )
    processor = Idefics3Processor(
        image_processor=images,
        tokenizer=tokenizer,
        image_seq_len=TOKENS_PER_TILE,
        chat_template=CHAT_TEMPLATE,
    )
    processor.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def save_random_idefics3(
    folder: Path | str,
    *,
    vocab_size: int = 250,
    hidden_size: int = 64,
    num_layers: int = 2,
    vision_hidden_size: int = 32,
    vision_layers: int = 1,
    splitting: bool = True,
    dtype: str = "float32",
    seed: int = 0,
) -> Path:
    """Save a randomly initialised `Idefics3ForConditionalGeneration` (a tiny Idefics3 vision tower on
    `TILE`-pixel tiles, a tiny Llama decoder) with its processor (`save_idefics3_processor`) to `folder`."""
    import torch
    from transformers import Idefics3Config, Idefics3ForConditionalGeneration

    text = dict(
        model_type="llama",
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        initializer_range=0.2,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=0,
    )
    vision = dict(
        hidden_size=vision_hidden_size,
        intermediate_size=2 * vision_hidden_size,
        num_hidden_layers=vision_layers,
        num_attention_heads=2,
        image_size=TILE,
        patch_size=14,
    )
    config = Idefics3Config(
        text_config=text,
        vision_config=vision,
        image_token_id=vocab_size - len(IMAGE_TOKENS) + 1,
        scale_factor=2,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = Idefics3ForConditionalGeneration(config)
    model.to(getattr(torch, dtype)).save_pretrained(folder, safe_serialization=True)
    return save_idefics3_processor(folder, vocab_size=vocab_size, splitting=splitting)
