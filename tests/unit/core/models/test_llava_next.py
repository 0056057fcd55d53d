"""LLaVA-NeXT through `LLMEngine` on the CPU backend against transformers' `LlavaNextForConditionalGeneration`
on the same random weights (float32, greedy): one image, two images of different sizes (so of different
placeholder counts), a batch with a text-only request, an image split by chunked prefill, preemption, the
prefix cache. The requests are made by the server's image path (`ImagePreprocessor.prepare` on the real
`LlavaNextProcessor`: each image's `image_sizes` in its `ImageInput.extras`), the reference's inputs by the
processor itself."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from tgi.core.config import EngineConfig  # noqa: E402
from tgi.core.engine import LLMEngine  # noqa: E402
from tgi.core.sampling_params import SamplingParams  # noqa: E402
from tgi.core.testing.tiny_llava_next import save_random_llava_next  # noqa: E402
from tgi.server.images.decode import DecodedImage  # noqa: E402
from tgi.server.images.processor import ImagePreprocessor, load_processor  # noqa: E402

NEW_TOKENS = 6


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return str(save_random_llava_next(tmp_path_factory.mktemp("tiny-llava-next")))


@pytest.fixture(scope="module")
def processor(checkpoint):
    return ImagePreprocessor(load_processor(checkpoint))


@pytest.fixture(scope="module")
def reference(checkpoint):
    return transformers.LlavaNextForConditionalGeneration.from_pretrained(
        checkpoint, dtype=torch.float32
    ).eval()


def _picture(seed: int, height: int = 40, width: int = 60) -> DecodedImage:
    from PIL import Image

    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 255, (height, width, 3), dtype=np.uint8)
    return DecodedImage(Image.fromarray(pixels), bytes([seed]) * 32)


def _request(processor, text: str, pictures: list[DecodedImage]):
    """(prompt token ids, the `ImageInput`s as the server makes them, transformers' inputs)."""
    ids, images = processor.prepare(text, pictures, add_special_tokens=False) if pictures else (None, ())
    enc = processor.processor(
        text=[text], images=[p.image for p in pictures] or None, return_tensors="pt", add_special_tokens=False
    )
    assert ids is None or enc["input_ids"][0].tolist() == ids
    return enc["input_ids"][0].tolist(), images, enc


def _expected(reference, enc) -> list[int]:
    with torch.no_grad():
        out = reference.generate(**enc, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False)
    return out[0, enc["input_ids"].shape[1] :].tolist()


def _engine(checkpoint, **kwargs) -> LLMEngine:
    settings = dict(
        model_id=checkpoint, backend="cpu", dtype="float32", max_total_tokens=128,
        max_batch_total_tokens=512, max_batch_prefill_tokens=64, block_size=4,
    )  # fmt: skip
    return LLMEngine.from_config(EngineConfig(**(settings | kwargs)))


def _run(engine: LLMEngine, requests) -> list[list[int]]:
    params = SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True)
    order = [engine.add_validated_request(engine.validate(r[0], params, r[1])) for r in requests]
    tokens: dict[str, list[int]] = {rid: [] for rid in order}
    while engine.has_unfinished():
        for event in engine.step():
            tokens[event.request_id].append(event.token_id)
    return [tokens[rid] for rid in order]


def test_one_image_two_images_of_different_sizes_and_a_mixed_batch_match_transformers(
    checkpoint, processor, reference
):
    engine = _engine(checkpoint)
    assert engine.runner.capabilities().image_inputs
    one = _request(processor, "w5 w6 <image> w7 w8 w9", [_picture(0)])
    two = _request(processor, "w10 <image> w11 w12 <image> w13", [_picture(1), _picture(2, 30, 30)])
    assert [tuple(x.extras["image_sizes"][0]) for x in two[1]] == [(40, 60), (30, 30)]
    assert [x.num_tokens for x in two[1]] == [14, 24]  # the size decides the placeholders
    text = _request(processor, "w5 w6 w7 w8 w9 w20", [])
    expected = [_expected(reference, r[2]) for r in (one, two, text)]
    assert _run(engine, [one]) == expected[:1]
    assert _run(engine, [one, two, text]) == expected  # `one` again: its blocks come from the prefix cache
    assert engine.runner.images.num_kept_requests == 0


def test_an_image_split_by_chunked_prefill_matches_transformers(checkpoint, processor, reference):
    engine = _engine(checkpoint, max_batch_prefill_tokens=4, prefix_caching=False)
    request = _request(processor, "w5 w6 <image> w8 w9", [_picture(3)])
    (image,) = request[1]
    assert image.offset % 4 and image.num_tokens > 8  # across several chunks
    assert _run(engine, [request]) == [_expected(reference, request[2])]
    assert engine.runner.images.num_encoded == 1


def test_preemption_encodes_again_and_matches_transformers(checkpoint, processor, reference):
    # room for one request's prompt and output at a time: the second preempts and recomputes the first
    engine = _engine(
        checkpoint, max_batch_total_tokens=32, max_total_tokens=28, max_batch_prefill_tokens=28,
        prefix_caching=False,
    )  # fmt: skip
    a = _request(processor, "w5 w6 <image> w7 w8", [_picture(6)])
    b = _request(processor, "w30 <image> w31 w32", [_picture(7, 60, 40)])
    expected = [_expected(reference, r[2]) for r in (a, b)]
    assert _run(engine, [a, b]) == expected
    assert engine.stats().num_preemptions >= 1
    assert engine.runner.images.num_encoded >= 3


def test_the_prefix_cache_shares_blocks_of_the_same_image_only(checkpoint, processor, reference):
    engine = _engine(checkpoint)
    text = "w5 w6 w7 w8 w9 w10 w11 w12 <image> w13 w14 w15 w16 w17 w18 w19"
    cat = _request(processor, text, [_picture(4)])
    dog = _request(processor, text, [_picture(5)])
    assert cat[0] == dog[0]  # the same prompt tokens
    _run(engine, [cat])

    def hits() -> int:
        return engine.stats().num_prefix_cache_hit_tokens

    before = hits()
    assert _run(engine, [dog]) == [_expected(reference, dog[2])]
    assert hits() - before == 8  # the two blocks of text before the image
    before = hits()
    assert _run(engine, [cat]) == [_expected(reference, cat[2])]
    assert hits() - before == 4 * ((len(cat[0]) - 1) // 4)


def test_the_model_class_and_its_image_newline(checkpoint):
    from tgi.core.models.registry import model_class_for

    config = transformers.AutoConfig.from_pretrained(checkpoint)
    cls = model_class_for(config)
    assert cls.__module__ == "tgi.core.models.llava_next"
    # transformers 5's layout and the llava-hf one name the same parameter
    assert {cls._local_name(n) for n in ("image_newline", "model.image_newline")} == {"image_newline"}
    assert cls._local_name("model.vision_tower.vision_model.embeddings.x") == "vision_tower.embeddings.x"
    engine = _engine(checkpoint)
    reference = transformers.LlavaNextForConditionalGeneration.from_pretrained(
        checkpoint, dtype=torch.float32
    )
    assert torch.equal(engine.runner.model.image_newline, reference.model.image_newline)
