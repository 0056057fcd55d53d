"""The serving benchmark's vision-language model at a real size: an `Idefics3ForConditionalGeneration` of
SmolVLM-256M-Instruct's shapes with random weights (transformers' initialisation, a fixed seed), its
processor a real `Idefics3Processor` that tiles images as SmolVLM's does, written as a Hugging Face folder
(config.json, float32 safetensors, processor and tokenizer files) for our server's image path. Nothing is
read from the hub.

Shapes (`SMOLVLM_256M`): the vision tower is SigLIP-base-patch16-512's (hidden 768, 12 layers, 12 heads,
intermediate 3072, patches of 16 on 512-pixel tiles); the connector shuffles 4 x 4 patches into one, so a
tile is (512 / 16)² / 16 = 64 placeholder tokens; the decoder is SmolLM2-135M's (hidden 576, 30 layers, 9
heads, 3 KV heads, intermediate 1536, RoPE base 100000, 8192 positions, untied head) over 49,280 tokens.
The processor resizes an image's longest edge to 2048 (4 x 512) and cuts it into 512-pixel tiles plus the
whole image shrunk to one tile: a 448 x 448 image is 16 + 1 tiles, 1088 placeholders.

The tokenizer is the default model's (SmolLM2-135M-Instruct's 49,152 tokens, transformers' reading of its
GGUF) with SmolVLM's 128 added tokens at SmolVLM's ids: `<global-img>` 49152, `<row_1_col_1>` ...
`<row_6_col_6>` 49153-49188, `<fake_token_around_image>` 49189, `<image>` 49190, 88 reserved tokens,
`<end_of_utterance>` 49279 (the end of a turn and the EOS). The chat template is SmolVLM-style
(`<|im_start|>User:<image>text<end_of_utterance>` ... `Assistant:`).

Float32 on disk: what the CPU backend serves on AVX2-only CPUs, so the weights load without a cast (~1.0 GB;
other backends cast at load).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tgi.core.testing.tiny_idefics3 import Idefics3Shape

#: SmolVLM-256M-Instruct's shapes (see the module's docstring)
SMOLVLM_256M = Idefics3Shape(
    vocab_size=49280,
    hidden_size=576,
    intermediate_size=1536,
    num_layers=30,
    heads=9,
    kv_heads=3,
    max_positions=8192,
    rope_theta=100000.0,
    initializer_range=0.02,
    vision_hidden_size=768,
    vision_intermediate_size=3072,
    vision_layers=12,
    vision_heads=12,
    tile=512,
    patch_size=16,
    scale_factor=4,
    longest_edge=2048,
)
#: vision-language shapes named on the command line (`--model-shape`)
VLM_SHAPES = {"smolvlm-256m": SMOLVLM_256M}
#: the dtype of the written weights
DTYPE = "float32"

#: the default model's vocabulary; SmolVLM's added tokens follow it, in this order
BASE_VOCAB = 49152
ADDED_TOKENS = (
    "<global-img>",
    *(f"<row_{r}_col_{c}>" for r in range(1, 7) for c in range(1, 7)),
    "<fake_token_around_image>",
    "<image>",
    *(f"<|reserved_special_token_{i}|>" for i in range(88)),
    "<end_of_utterance>",
)
IMAGE_TOKEN_ID = BASE_VOCAB + ADDED_TOKENS.index("<image>")  # 49190
END_OF_UTTERANCE_ID = BASE_VOCAB + len(ADDED_TOKENS) - 1  # 49279

CHAT_TEMPLATE = (
    "<|im_start|>{% for m in messages %}{{ m['role'] | capitalize }}:"
    "{% if m['content'] is string %} {{ m['content'] }}"
    "{% else %}{% for p in m['content'] %}"
    "{% if p['type'] == 'image' %}<image>{% else %} {{ p['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}Assistant:{% endif %}"
)


def smolvlm_tokenizer():
    """The default model's tokenizer with `ADDED_TOKENS` at ids `BASE_VOCAB`... (`len` 49,280), EOS
    `<end_of_utterance>`; ValueError where the default tokenizer is not `BASE_VOCAB` tokens."""
    from tgi.core.loading.resolve import default_model_path, resolve_model
    from tgi.core.tokenization import load_tokenizer

    tokenizer = load_tokenizer(
        resolve_model(default_model_path())
    )  # transformers' reading, cached per machine
    if len(tokenizer) != BASE_VOCAB:
        raise ValueError(
            f"the default tokenizer has {len(tokenizer)} tokens, SmolVLM's starts at {BASE_VOCAB}"
        )
    tokenizer.add_special_tokens({"additional_special_tokens": list(ADDED_TOKENS)})
    tokenizer.eos_token = "<end_of_utterance>"
    got = tokenizer.convert_tokens_to_ids(["<image>", "<end_of_utterance>"])
    if got != [IMAGE_TOKEN_ID, END_OF_UTTERANCE_ID] or len(tokenizer) != BASE_VOCAB + len(ADDED_TOKENS):
        raise ValueError(
            f"SmolVLM's added tokens landed at {got}, not {[IMAGE_TOKEN_ID, END_OF_UTTERANCE_ID]}"
        )
    return tokenizer


def vlm_config(shape: Idefics3Shape, tokenizer=None):
    """The `Idefics3Config` of `shape` with SmolVLM's token ids (`<image>` 49190, EOS 49279, PAD
    `<|im_end|>` 2; BOS the tokenizer's, 1 without one). Builds no weights."""
    from tgi.core.testing.tiny_idefics3 import idefics3_config

    if shape.vocab_size != BASE_VOCAB + len(ADDED_TOKENS):
        raise ValueError(
            f"a SmolVLM tokenizer has {BASE_VOCAB + len(ADDED_TOKENS)} tokens, not {shape.vocab_size}"
        )
    bos = tokenizer.bos_token_id if tokenizer is not None and tokenizer.bos_token_id is not None else 1
    return idefics3_config(
        shape,
        image_token_id=IMAGE_TOKEN_ID,
        bos_token_id=bos,
        eos_token_id=END_OF_UTTERANCE_ID,
        pad_token_id=2,
    )


def write_vlm_folder(
    folder: str | Path, shape: Idefics3Shape = SMOLVLM_256M, seed: int = 0, dtype: str = DTYPE
) -> Path:
    """Write the model of `shape` (its vocabulary SmolVLM's 49,280 tokens) with its processor, tokenizer
    and chat template to `folder` (through `<folder>.partial`, renamed when complete); returns `folder`."""
    from tgi.core.testing.tiny_idefics3 import save_idefics3_processor, write_idefics3_model

    folder = Path(folder)
    partial = folder.with_name(folder.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    tokenizer = smolvlm_tokenizer()
    write_idefics3_model(partial, vlm_config(shape, tokenizer), dtype=dtype, seed=seed)
    save_idefics3_processor(
        partial,
        longest_edge=shape.longest_edge,
        tile=shape.tile,
        tokens_per_tile=shape.tokens_per_tile,
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
    )
    shutil.rmtree(folder, ignore_errors=True)
    os.replace(partial, folder)
    return folder
