"""Vision-language models through `LLMEngine` on the CPU backend against transformers' own model on the same
random weights (float32, greedy): the scaffolding tests/unit/core/models/test_{llava,llava_next,qwen2_vl,
idefics3,gemma3_vl}.py share. Pictures of random pixels, requests made by the server's image path
(`ImagePreprocessor.prepare`) beside the processor's own inputs for the reference, the reference's greedy
tokens, a small-block engine and the tokens it generates for a batch of requests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.sampling_params import SamplingParams

#: how many tokens every request generates (greedy, past EOS)
NEW_TOKENS = 6


def pil_picture(seed: int, height: int = 40, width: int = 60):
    """A PIL image of random pixels drawn from `seed`."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 255, (height, width, 3), dtype=np.uint8))


def picture(seed: int, height: int = 40, width: int = 60):
    """`pil_picture` as the server decodes an image (a `DecodedImage`, its content hash from `seed`)."""
    from tgi.server.images.decode import DecodedImage

    return DecodedImage(pil_picture(seed, height, width), bytes([seed]) * 32)


def server_request(processor, text: str, pictures: Sequence):
    """(prompt token ids, the `ImageInput`s as the server makes them, transformers' inputs): `processor` is
    the server's `ImagePreprocessor`, `pictures` are `DecodedImage`s; the server's ids are checked to be the
    processor's."""
    ids, images = processor.prepare(text, pictures, add_special_tokens=False) if pictures else (None, ())
    enc = processor.processor(
        text=[text], images=[p.image for p in pictures] or None, return_tensors="pt", add_special_tokens=False
    )
    assert ids is None or enc["input_ids"][0].tolist() == ids
    return enc["input_ids"][0].tolist(), images, enc


def expected(reference, enc: Mapping[str, Any]) -> list[int]:
    """The `NEW_TOKENS` greedy tokens transformers' `reference` generates after the prompt of inputs `enc`."""
    import torch

    with torch.no_grad():
        out = reference.generate(**enc, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)
    return out[0, enc["input_ids"].shape[1] :].tolist()


def engine(model_id: str | Path, **kwargs) -> LLMEngine:
    """An engine on the CPU backend (float32, blocks of 4 tokens) for checkpoint `model_id`; `kwargs` override
    its settings."""
    settings = dict(
        model_id=str(model_id), backend="cpu", dtype="float32", max_total_tokens=128,
        max_batch_total_tokens=512, max_batch_prefill_tokens=64, block_size=4,
    )  # fmt: skip
    return LLMEngine.from_config(EngineConfig(**(settings | kwargs)))


def run(engine: LLMEngine, requests) -> list[list[int]]:
    """Each request's `NEW_TOKENS` tokens, the requests ((prompt ids, `ImageInput`s, ...)) run together."""
    params = SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True)
    order = [engine.add_validated_request(engine.validate(r[0], params, r[1])) for r in requests]
    tokens: dict[str, list[int]] = {rid: [] for rid in order}
    while engine.has_unfinished():
        for event in engine.step():
            tokens[event.request_id].append(event.token_id)
    return [tokens[rid] for rid in order]


def run_counting_hits(engine: LLMEngine, request) -> tuple[list[int], int]:
    """`run` of one request: its tokens and how many of its prompt tokens the prefix cache gave."""
    before = engine.stats().num_prefix_cache_hit_tokens
    (tokens,) = run(engine, [request])
    return tokens, engine.stats().num_prefix_cache_hit_tokens - before


def nothing_kept(engine: LLMEngine, positions: bool = False) -> bool:
    """Whether the runner keeps no image embeddings (and, with `positions`, no M-RoPE positions) once the
    requests are done (their ids reach it with the next step's batch: one more request runs first)."""
    run(engine, [([3, 4], ())])
    runner = engine.runner
    kept = runner.images.num_kept_requests
    return kept == 0 and (not positions or runner.request_positions.num_kept_requests == 0)


def checked_config(checkpoint: str | Path, module: str):
    """The checkpoint's config, once checked that core's `module` serves it, that its attention has the text
    model's layers and that tensor parallelism is refused by name."""
    import pytest
    import transformers

    from tgi.core.models.registry import UnsupportedModelError, attention_layer_specs, model_class_for

    config = transformers.AutoConfig.from_pretrained(checkpoint)
    assert model_class_for(config).__module__ == module
    assert len(attention_layer_specs(config)) == config.text_config.num_hidden_layers
    with pytest.raises(UnsupportedModelError, match="tensor parallelism"):
        attention_layer_specs(config, tp_size=2)
    return config
