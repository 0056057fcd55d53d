"""Qwen2-VL's M-RoPE on the Triton backends: a tiny random Qwen2-VL served by `CudaBackend` on CPU tensors,
every kernel run by triton's interpreter (`TRITON_INTERPRET=1`, set by tests/conftest.py), gives
transformers' greedy tokens for a request with two images of different grids beside a text-only one: the
Triton attention and its fused rotary kernel take the sectioned cos/sin of prefill chunks that feed image
placeholders ([3, T] positions) and the rope-delta positions of decodes ([T], what a captured CUDA graph
replays). Skipped where a GPU is visible."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

if torch.cuda.is_available():
    pytest.skip("a GPU is visible: the kernels are not interpreted", allow_module_level=True)
if os.environ.get("TRITON_INTERPRET") != "1":
    pytest.skip("TRITON_INTERPRET=1 was not set before triton was imported", allow_module_level=True)
pytest.importorskip("triton", reason="triton is not installed (pip install triton; CI installs it)")

from interpreted_cuda import InterpretedCudaBackend

from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.model import backend_registry
from tgi.core.testing.tiny_qwen2_vl import save_random_qwen2_vl
from tgi.server.images.decode import DecodedImage
from tgi.server.images.processor import ImagePreprocessor, load_processor

NEW_TOKENS = 4
VISION = "<|vision_start|><|image_pad|><|vision_end|>"


def _picture(seed: int, height: int, width: int) -> DecodedImage:
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 255, (height, width, 3), dtype=np.uint8)
    return DecodedImage(Image.fromarray(pixels), bytes([seed]) * 32)


def test_two_images_and_a_text_request_give_transformers_tokens(tmp_path):
    transformers = pytest.importorskip("transformers")
    folder = str(save_random_qwen2_vl(tmp_path / "qwen2-vl"))
    processor = ImagePreprocessor(load_processor(folder))
    text = f"w10 {VISION} w11 w12 {VISION} w13"
    pictures = [_picture(1, 40, 60), _picture(2, 90, 40)]
    ids, images = processor.prepare(text, pictures, add_special_tokens=False)
    enc = processor.processor(
        text=[text], images=[p.image for p in pictures], return_tensors="pt", add_special_tokens=False
    )
    reference = transformers.AutoModelForImageTextToText.from_pretrained(folder, dtype=torch.float32).eval()
    out = reference.generate(**enc, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)
    expected = out[0, len(ids) :].tolist()

    config = EngineConfig(
        model_id=folder, backend="cuda-interpreted", dtype="float32", block_size=4, max_total_tokens=64,
        max_batch_total_tokens=128, max_batch_prefill_tokens=16, max_num_seqs=2,
    )  # fmt: skip
    engine = LLMEngine.from_config(
        config, registry=backend_registry("cuda-interpreted", InterpretedCudaBackend)
    )
    params = SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True)
    order = [
        engine.add_validated_request(engine.validate(ids, params, images)),
        engine.add_validated_request(engine.validate([5, 6, 7], params)),
    ]
    tokens: dict[str, list[int]] = {rid: [] for rid in order}
    while engine.has_unfinished():
        for event in engine.step():
            tokens[event.request_id].append(event.token_id)
    assert tokens[order[0]] == expected
    assert len(tokens[order[1]]) == NEW_TOKENS
