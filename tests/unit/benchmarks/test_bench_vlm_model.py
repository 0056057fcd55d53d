"""The serving benchmark's `smolvlm-256m` shape (`tgi.benchmarks.vlm_model`): SmolVLM-256M-Instruct's config
fields and parameter count (built on the meta device: no full-size weights are written); the folder
`prepare` writes, on a narrow override of the shape with the real tiles, vocabulary and token ids, served by
our image path (SmolVLM's tiling: a 448 x 448 image is 4 x 4 tiles of 512 and the whole image, 64
placeholders each); `tgi benchmark serving` refusing peers other than ours for it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from image_files import image_bytes
from llama_cpp_build import NO_TOOLS

from tgi.benchmarks.bench_model import SHAPE_NAMES, VLM_WRITER, default_format, prepare
from tgi.benchmarks.vlm_model import IMAGE_TOKEN_ID, SMOLVLM_256M, VLM_SHAPES, vlm_config
from tgi.core.testing.tiny_idefics3 import TILE, TOKENS_PER_TILE, Idefics3Shape

#: SmolVLM-256M's shape, narrow (one thin layer each side) but with its tiles, patches, shuffle and vocabulary
NARROW = dataclasses.replace(
    SMOLVLM_256M,
    hidden_size=64,
    intermediate_size=128,
    num_layers=1,
    heads=4,
    kv_heads=2,
    vision_hidden_size=32,
    vision_intermediate_size=64,
    vision_layers=1,
    vision_heads=2,
)


def test_smolvlm_256m_config_has_smolvlm_shapes_and_256m_parameters():
    import torch
    from transformers import Idefics3ForConditionalGeneration

    assert VLM_SHAPES["smolvlm-256m"] is SMOLVLM_256M and "smolvlm-256m" in SHAPE_NAMES
    assert default_format("smolvlm-256m") == "safetensors" and default_format("1b") == "Q4_K_M"
    config = vlm_config(SMOLVLM_256M)
    v, t = config.vision_config, config.text_config
    assert v.model_type == "idefics3_vision"
    assert (v.hidden_size, v.num_hidden_layers, v.num_attention_heads) == (768, 12, 12)
    assert (v.intermediate_size, v.patch_size, v.image_size) == (3072, 16, 512)
    assert (t.model_type, t.hidden_size, t.num_hidden_layers, t.num_attention_heads) == ("llama", 576, 30, 9)
    assert (t.num_key_value_heads, t.intermediate_size, t.vocab_size) == (3, 1536, 49152 + 128)
    assert (t.max_position_embeddings, t.rope_parameters["rope_theta"]) == (8192, 100000.0)
    assert (t.eos_token_id, t.pad_token_id) == (49279, 2)
    assert (config.scale_factor, config.image_token_id, config.tie_word_embeddings) == (4, 49190, False)
    assert SMOLVLM_256M.tokens_per_tile == 64 and SMOLVLM_256M.longest_edge == 4 * 512
    with torch.device("meta"):
        model = Idefics3ForConditionalGeneration(config)
    assert 255e6 < sum(p.numel() for p in model.parameters()) < 258e6
    # the tiny test model's defaults are unchanged
    assert Idefics3Shape().tokens_per_tile == TOKENS_PER_TILE and Idefics3Shape().tile == TILE


def test_made_folder_is_served_by_our_image_path(tmp_path):
    from transformers import AutoConfig

    from tgi.server.images.decode import decode_image
    from tgi.server.images.limits import ImageLimits
    from tgi.server.images.processor import ImagePreprocessor

    notes = []
    made = prepare("safetensors", NO_TOOLS, tmp_path, "narrow-vlm", NARROW, log=notes.append)
    assert (made.format, made.gguf, made.made_by) == ("safetensors", "", VLM_WRITER)
    folder = Path(made.ours)
    assert folder.name == "hf-float32" and folder.parent.name.startswith("idefics3-narrow-vlm-")
    assert prepare("safetensors", NO_TOOLS, tmp_path, "narrow-vlm", NARROW, log=notes.append) == made
    assert len(notes) == 1  # written once, then taken from the cache
    with pytest.raises(ValueError, match="safetensors only"):
        prepare("Q4_K_M", NO_TOOLS, tmp_path, "narrow-vlm", NARROW)
    config = AutoConfig.from_pretrained(folder)
    assert (config.image_token_id, config.scale_factor, config.vision_config.image_size) == (49190, 4, 512)
    written = json.loads((folder / "config.json").read_text())
    assert written["architectures"] == ["Idefics3ForConditionalGeneration"]
    pre = ImagePreprocessor.load(str(folder))
    assert pre is not None and pre.image_token_id == IMAGE_TOKEN_ID
    image = decode_image(image_bytes(448, 448), "image/png", ImageLimits())
    messages = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What is it?"}]}]
    text = pre.processor.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>User:<image> What is it?<end_of_utterance>\nAssistant:"
    ids, tiles = pre.prepare(text, [image], add_special_tokens=False)
    assert len(tiles) == 4 * 4 + 1 and all(x.num_tokens == 64 for x in tiles)
    assert ids.count(IMAGE_TOKEN_ID) == 17 * 64 and tiles[0].pixel_values.shape == (1, 3, 512, 512)


def test_serving_takes_only_ours_for_the_vlm_shape(capsys):
    from tgi.server.cli.main import main

    argv = ["benchmark", "serving", "--start", "ours", "--model-shape", "smolvlm-256m", "--start"]
    assert main([*argv, "llama.cpp"]) == 2
    err = capsys.readouterr().err
    assert "--model-shape smolvlm-256m is served by --start ours only, not llama.cpp" in err
    assert "mmproj" in err
    assert main([*argv, "transformers"]) == 2
    assert "not transformers" in capsys.readouterr().err
