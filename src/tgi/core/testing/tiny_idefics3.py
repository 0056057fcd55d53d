"""A random-weight Idefics3 (SmolVLM) checkpoint with its real processor (`Idefics3Processor`: the Idefics3
image processor with small tiles, a word-level tokenizer holding Idefics3's image, tile and global-image
tokens, a chat template that renders image parts as `<image>`), for tests of tiled image requests end to
end. Nothing is read from the hub.

The sizes are parameters (`Idefics3Shape`, whose defaults are the tiny test model's): the benchmark's
SmolVLM-256M-shaped checkpoint (`tgi.benchmarks.vlm_model`) is written by the same `write_idefics3_model`
and `save_idefics3_processor`, with its own shape, token ids and tokenizer."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tgi.core.testing.tiny_vlm import save_random_weights

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


@dataclass(frozen=True)
class Idefics3Shape:
    """An Idefics3's sizes: a Llama decoder (`intermediate_size` 0: twice `hidden_size`; `rope_theta` 0:
    transformers' default), an Idefics3 (SigLIP) vision tower on `tile`-pixel tiles (`vision_intermediate_size`
    0: twice `vision_hidden_size`), the connector's pixel shuffle `scale_factor`, and the processor's
    `longest_edge` (an image is resized to it, then cut into tiles). The defaults are the tiny test model's."""

    vocab_size: int = 250
    hidden_size: int = 64
    intermediate_size: int = 0
    num_layers: int = 2
    heads: int = 4
    kv_heads: int = 2
    max_positions: int = 512
    rope_theta: float = 0.0
    initializer_range: float = 0.2
    vision_hidden_size: int = 32
    vision_intermediate_size: int = 0
    vision_layers: int = 1
    vision_heads: int = 2
    tile: int = TILE
    patch_size: int = 14
    scale_factor: int = 2
    longest_edge: int = 2 * TILE

    @property
    def tokens_per_tile(self) -> int:
        """Placeholder tokens per tile: the tile's patches, `scale_factor`² of them shuffled into one."""
        return (self.tile // self.patch_size) ** 2 // self.scale_factor**2


def _word_tokenizer(vocab_size: int):
    """A word-level tokenizer of `vocab_size` words (`<unk>`=0, `</s>`=1, `\\n`=2, `w3`...), Idefics3's image
    tokens the last ids."""
    from tokenizers import Regex, Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Sequence, Split
    from transformers import PreTrainedTokenizerFast

    words = vocab_size - len(IMAGE_TOKENS)
    vocab = {"<unk>": 0, "</s>": 1, "\n": 2, **{f"w{i}": i for i in range(3, words)}}
    vocab.update({token: words + i for i, token in enumerate(IMAGE_TOKENS)})
    backend = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
    # words split at spaces; a newline is a word of its own (the processor writes one after each tile row)
    backend.pre_tokenizer = Sequence([Split(" ", "removed"), Split(Regex("\n"), "isolated")])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="</s>", unk_token="<unk>")
    tokenizer.add_special_tokens({"additional_special_tokens": list(IMAGE_TOKENS)})
    return tokenizer


def save_idefics3_processor(
    folder: Path | str,
    *,
    vocab_size: int = 250,
    longest_edge: int = 2 * TILE,
    splitting: bool = True,
    tile: int = TILE,
    tokens_per_tile: int = TOKENS_PER_TILE,
    tokenizer: Any = None,
    chat_template: str = CHAT_TEMPLATE,
) -> Path:
    """Save an `Idefics3Processor` to `folder` (returned): images resized to at most `longest_edge` pixels a
    side and, with `splitting`, cut into tiles of `tile` pixels plus the whole image shrunk to one tile (each
    tile `tokens_per_tile` placeholder tokens); `tokenizer` (one that holds `IMAGE_TOKENS`), or by default a
    word-level tokenizer of `vocab_size` words (`<unk>`=0, `</s>`=1, `\\n`=2, `w3`...; Idefics3's image tokens
    are the last ids, `<image>` at `vocab_size - len(IMAGE_TOKENS) + 1`); `chat_template` on both."""
    from transformers import Idefics3ImageProcessorPil, Idefics3Processor

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if tokenizer is None:
        tokenizer = _word_tokenizer(vocab_size)
    tokenizer.chat_template = chat_template
    images = Idefics3ImageProcessorPil(
        size={"longest_edge": longest_edge},
        max_image_size={"longest_edge": tile},
        do_image_splitting=splitting,
    )
    processor = Idefics3Processor(
        image_processor=images,
        tokenizer=tokenizer,
        image_seq_len=tokens_per_tile,
        chat_template=chat_template,
    )
    processor.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def idefics3_config(
    shape: Idefics3Shape, *, image_token_id: int, bos_token_id: int, eos_token_id: int, pad_token_id: int
):
    """The `Idefics3Config` of `shape` (untied output head; only the decoder's initializer range and, where
    set, RoPE base differ from transformers' defaults). Builds no weights."""
    from transformers import Idefics3Config

    text = dict(
        model_type="llama",
        vocab_size=shape.vocab_size,
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size or 2 * shape.hidden_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        max_position_embeddings=shape.max_positions,
        initializer_range=shape.initializer_range,
        bos_token_id=bos_token_id,
        eos_token_id=eos_token_id,
        pad_token_id=pad_token_id,
    )
    if shape.rope_theta:
        text["rope_parameters"] = {"rope_type": "default", "rope_theta": float(shape.rope_theta)}
    vision = dict(
        hidden_size=shape.vision_hidden_size,
        intermediate_size=shape.vision_intermediate_size or 2 * shape.vision_hidden_size,
        num_hidden_layers=shape.vision_layers,
        num_attention_heads=shape.vision_heads,
        image_size=shape.tile,
        patch_size=shape.patch_size,
    )
    return Idefics3Config(
        text_config=text,
        vision_config=vision,
        image_token_id=image_token_id,
        scale_factor=shape.scale_factor,
        tie_word_embeddings=False,
    )


def write_idefics3_model(folder: Path | str, config: Any, *, dtype: str = "float32", seed: int = 0) -> None:
    """Save a randomly initialised (`seed`) `Idefics3ForConditionalGeneration` of `config` to `folder` as
    safetensors in `dtype` (the weights only: no processor)."""
    from transformers import Idefics3ForConditionalGeneration

    save_random_weights(Idefics3ForConditionalGeneration, config, folder, dtype=dtype, seed=seed)


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
    shape: Idefics3Shape | None = None,
) -> Path:
    """Save a randomly initialised `Idefics3ForConditionalGeneration` (a tiny Idefics3 vision tower on
    `TILE`-pixel tiles, a tiny Llama decoder; `shape`, where given, replaces the five size arguments) with
    its word-level processor (`save_idefics3_processor`) to `folder`."""
    if shape is None:
        shape = Idefics3Shape(
            vocab_size=vocab_size,
            hidden_size=hidden_size,
            num_layers=num_layers,
            vision_hidden_size=vision_hidden_size,
            vision_layers=vision_layers,
        )
    config = idefics3_config(
        shape,
        image_token_id=shape.vocab_size - len(IMAGE_TOKENS) + 1,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=0,
    )
    write_idefics3_model(folder, config, dtype=dtype, seed=seed)
    return save_idefics3_processor(
        folder,
        vocab_size=shape.vocab_size,
        longest_edge=shape.longest_edge,
        splitting=splitting,
        tile=shape.tile,
        tokens_per_tile=shape.tokens_per_tile,
    )
