"""LLaVA-NeXT through `LLMEngine` on the CPU backend against transformers' `LlavaNextForConditionalGeneration`
on the same random weights (float32, greedy): one image, two images of different sizes (so of different
placeholder counts), a batch with a text-only request, an image split by chunked prefill, preemption, the
prefix cache. The requests are made by the server's image path (`ImagePreprocessor.prepare` on the real
`LlavaNextProcessor`: each image's `image_sizes` in its `ImageInput.extras`), the reference's inputs by the
processor itself."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import vlm_parity as vlm  # noqa: E402

from tgi.core.testing.tiny_llava_next import save_random_llava_next  # noqa: E402
from tgi.server.images.processor import ImagePreprocessor, load_processor  # noqa: E402


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


def test_one_image_two_images_of_different_sizes_and_a_mixed_batch_match_transformers(
    checkpoint, processor, reference
):
    engine = vlm.engine(checkpoint)
    assert engine.runner.capabilities().image_inputs
    one = vlm.server_request(processor, "w5 w6 <image> w7 w8 w9", [vlm.picture(0)])
    two = vlm.server_request(
        processor, "w10 <image> w11 w12 <image> w13", [vlm.picture(1), vlm.picture(2, 30, 30)]
    )
    assert [tuple(x.extras["image_sizes"][0]) for x in two[1]] == [(40, 60), (30, 30)]
    assert [x.num_tokens for x in two[1]] == [14, 24]  # the size decides the placeholders
    text = vlm.server_request(processor, "w5 w6 w7 w8 w9 w20", [])
    expected = [vlm.expected(reference, r[2]) for r in (one, two, text)]
    assert vlm.run(engine, [one]) == expected[:1]
    assert vlm.run(engine, [one, two, text]) == expected  # `one` again: its blocks come from the prefix cache
    assert engine.runner.images.num_kept_requests == 0


def test_an_image_split_by_chunked_prefill_matches_transformers(checkpoint, processor, reference):
    engine = vlm.engine(checkpoint, max_batch_prefill_tokens=4, prefix_caching=False)
    request = vlm.server_request(processor, "w5 w6 <image> w8 w9", [vlm.picture(3)])
    (image,) = request[1]
    assert image.offset % 4 and image.num_tokens > 8  # across several chunks
    assert vlm.run(engine, [request]) == [vlm.expected(reference, request[2])]
    assert engine.runner.images.num_encoded == 1


def test_preemption_encodes_again_and_matches_transformers(checkpoint, processor, reference):
    # room for one request's prompt and output at a time: the second preempts and recomputes the first
    engine = vlm.engine(
        checkpoint, max_batch_total_tokens=32, max_total_tokens=28, max_batch_prefill_tokens=28,
        prefix_caching=False,
    )  # fmt: skip
    a = vlm.server_request(processor, "w5 w6 <image> w7 w8", [vlm.picture(6)])
    b = vlm.server_request(processor, "w30 <image> w31 w32", [vlm.picture(7, 60, 40)])
    expected = [vlm.expected(reference, r[2]) for r in (a, b)]
    assert vlm.run(engine, [a, b]) == expected
    assert engine.stats().num_preemptions >= 1
    assert engine.runner.images.num_encoded >= 3


def test_the_prefix_cache_shares_blocks_of_the_same_image_only(checkpoint, processor, reference):
    engine = vlm.engine(checkpoint)
    text = "w5 w6 w7 w8 w9 w10 w11 w12 <image> w13 w14 w15 w16 w17 w18 w19"
    cat = vlm.server_request(processor, text, [vlm.picture(4)])
    dog = vlm.server_request(processor, text, [vlm.picture(5)])
    assert cat[0] == dog[0]  # the same prompt tokens
    vlm.run(engine, [cat])
    tokens, hits = vlm.run_counting_hits(engine, dog)
    assert tokens == vlm.expected(reference, dog[2])
    assert hits == 8  # the two blocks of text before the image
    tokens, hits = vlm.run_counting_hits(engine, cat)
    assert tokens == vlm.expected(reference, cat[2])
    assert hits == 4 * ((len(cat[0]) - 1) // 4)


def test_the_model_class_and_its_image_newline(checkpoint):
    from tgi.core.models.registry import model_class_for

    config = transformers.AutoConfig.from_pretrained(checkpoint)
    cls = model_class_for(config)
    assert cls.__module__ == "tgi.core.models.llava_next"
    # transformers 5's layout and the llava-hf one name the same parameter
    assert {cls._local_name(n) for n in ("image_newline", "model.image_newline")} == {"image_newline"}
    assert cls._local_name("model.vision_tower.vision_model.embeddings.x") == "vision_tower.embeddings.x"
    engine = vlm.engine(checkpoint)
    reference = transformers.LlavaNextForConditionalGeneration.from_pretrained(
        checkpoint, dtype=torch.float32
    )
    assert torch.equal(engine.runner.model.image_newline, reference.model.image_newline)
