"""Idefics3 (SmolVLM's architecture) through `LLMEngine` on the CPU backend against transformers' own model on
the same random weights (float32, greedy): one image, two images of different tilings, a batch with a
text-only request, an image split by chunked prefill, preemption, the prefix cache; a padded tile's patch
mask against transformers' `get_image_features`. The requests are made by the server's image path
(`ImagePreprocessor.prepare` on the real `Idefics3Processor`, image splitting on: a 40 x 60 image is 2 x 2
tiles and the whole image, each tile its own `ImageInput`), the reference's inputs by the processor itself."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import vlm_parity as vlm  # noqa: E402

from tgi.core.testing.tiny_idefics3 import save_random_idefics3  # noqa: E402
from tgi.server.images.processor import ImagePreprocessor, load_processor  # noqa: E402


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return str(save_random_idefics3(tmp_path_factory.mktemp("tiny-idefics3")))


@pytest.fixture(scope="module")
def processor(checkpoint):
    return ImagePreprocessor(load_processor(checkpoint))


@pytest.fixture(scope="module")
def reference(checkpoint):
    return transformers.AutoModelForImageTextToText.from_pretrained(checkpoint, dtype=torch.float32).eval()


def test_one_image_two_images_and_a_mixed_batch_match_transformers(checkpoint, processor, reference):
    engine = vlm.engine(checkpoint)
    assert engine.runner.capabilities().image_inputs
    one = vlm.server_request(processor, "w5 w6 <image> w7 w8 w9", [vlm.picture(0)])
    two = vlm.server_request(
        processor, "w10 <image> w11 w12 <image> w13", [vlm.picture(1), vlm.picture(2, 90, 40)]
    )
    text = vlm.server_request(processor, "w5 w6 w7 w8 w9 w20", [])
    expected = [vlm.expected(reference, r[2]) for r in (one, two, text)]
    assert vlm.run(engine, [one]) == expected[:1]
    assert vlm.run(engine, [one, two, text]) == expected  # `one` again: its blocks come from the prefix cache
    assert vlm.nothing_kept(engine)


def test_an_unsplit_image_matches_transformers(checkpoint, reference):
    unsplit = load_processor(checkpoint)
    unsplit.image_processor.do_image_splitting = False
    request = vlm.server_request(ImagePreprocessor(unsplit), "w5 w6 <image> w7", [vlm.picture(8)])
    assert len(request[1]) == 1 and request[1][0].content_hash == bytes([8]) * 32
    assert vlm.run(vlm.engine(checkpoint), [request]) == [vlm.expected(reference, request[2])]


def test_an_image_split_by_chunked_prefill_matches_transformers(checkpoint, processor, reference):
    engine = vlm.engine(checkpoint, max_batch_prefill_tokens=4, prefix_caching=False)
    request = vlm.server_request(processor, "w5 w6 <image> w8 w9", [vlm.picture(3)])
    assert any(t.offset % 4 for t in request[1])  # tiles across chunk boundaries
    assert vlm.run(engine, [request]) == [vlm.expected(reference, request[2])]
    assert engine.runner.images.num_encoded == 5  # each tile once
    assert vlm.nothing_kept(engine)


def test_preemption_encodes_the_tiles_again(checkpoint, processor, reference):
    # room for one request's prompt and output at a time: the second preempts and recomputes the first
    engine = vlm.engine(
        checkpoint, max_batch_total_tokens=48, max_total_tokens=44, max_batch_prefill_tokens=44,
        prefix_caching=False,
    )  # fmt: skip
    a = vlm.server_request(processor, "w5 w6 <image> w7 w8", [vlm.picture(6)])
    b = vlm.server_request(processor, "w30 <image> w31", [vlm.picture(7)])
    expected = [vlm.expected(reference, r[2]) for r in (a, b)]
    assert vlm.run(engine, [a, b]) == expected
    assert engine.stats().num_preemptions >= 1
    assert engine.runner.images.num_encoded > 10
    assert vlm.nothing_kept(engine)


def test_the_prefix_cache_shares_blocks_of_the_same_image_only(checkpoint, processor, reference):
    engine = vlm.engine(checkpoint)
    text = "w5 w6 w7 w8 w9 w10 w11 w12 <image> w13 w14 w15 w16 w17 w18 w19"
    cat = vlm.server_request(processor, text, [vlm.picture(4)])
    dog = vlm.server_request(processor, text, [vlm.picture(5)])
    assert cat[0] == dog[0]  # the same prompt tokens
    vlm.run(engine, [cat])
    tokens, hits = vlm.run_counting_hits(engine, dog)
    assert tokens == vlm.expected(reference, dog[2]) != vlm.expected(reference, cat[2])
    assert hits == 8  # the two blocks of text before the first tile's block
    tokens, hits = vlm.run_counting_hits(engine, cat)
    assert tokens == vlm.expected(reference, cat[2])
    assert hits == 4 * ((len(cat[0]) - 1) // 4)


def test_a_tile_with_padding_is_encoded_as_transformers_encodes_it(checkpoint, reference):
    # the processor pads a tile smaller than the tower's input (its `pixel_attention_mask` 0 there): the
    # tower skips the patches with no real pixel, as transformers' `get_image_features` does
    model = vlm.engine(checkpoint).runner.model
    pixels = torch.randn(2, 3, 56, 56)
    mask = torch.ones(2, 56, 56, dtype=torch.int64)
    mask[0, :, 30:] = 0  # the right half of the first tile is padding
    pixels[0, :, :, 30:] = 0
    ours = model.encode_images(pixels, mask).reshape(-1, 64)
    theirs = reference.model.get_image_features(pixels[None], mask[None]).pooler_output[0]
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(ours[:4], model.encode_images(pixels[:1]).reshape(-1, 64), atol=1e-3)


def test_what_the_model_does_not_implement_is_refused_by_name(checkpoint):
    from tgi.core.models.registry import UnsupportedModelError, attention_layer_specs

    config = vlm.checked_config(checkpoint, "tgi.core.models.idefics3")
    config.vision_config.model_type = "siglip_vision_model"
    with pytest.raises(UnsupportedModelError, match="siglip_vision_model vision tower is not supported"):
        attention_layer_specs(config)
