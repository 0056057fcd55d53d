"""Qwen2-VL and Qwen2.5-VL through `LLMEngine` on the CPU backend against transformers' own model on the same
random weights (float32, greedy): one image, two images of different grids, a batch with a text-only request,
an image split by chunked prefill, preemption, the prefix cache. The requests are made by the server's image
path (`ImagePreprocessor.prepare` on the real `Qwen2VLProcessor`), the reference's inputs by the processor
itself. The tiny models' tokens depend on their positions: plain RoPE positions give other tokens."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import vlm_parity as vlm  # noqa: E402

from tgi.core.testing.tiny_qwen2_vl import save_random_qwen2_vl  # noqa: E402
from tgi.server.images.processor import ImagePreprocessor, load_processor  # noqa: E402

VISION = "<|vision_start|><|image_pad|><|vision_end|>"


@pytest.fixture(scope="module", params=["2", "2.5"], ids=["qwen2-vl", "qwen2.5-vl"])
def checkpoint(request, tmp_path_factory):
    return str(save_random_qwen2_vl(tmp_path_factory.mktemp("tiny-qwen-vl"), version=request.param))


@pytest.fixture(scope="module")
def processor(checkpoint):
    return ImagePreprocessor(load_processor(checkpoint))


@pytest.fixture(scope="module")
def reference(checkpoint):
    return transformers.AutoModelForImageTextToText.from_pretrained(checkpoint, dtype=torch.float32).eval()


def test_one_image_two_images_and_a_mixed_batch_match_transformers(checkpoint, processor, reference):
    engine = vlm.engine(checkpoint)
    assert engine.runner.capabilities().image_inputs
    one = vlm.server_request(processor, f"w5 w6 {VISION} w7 w8 w9", [vlm.picture(0)])
    # two grids: 4 x 6 patches (2 x 3 merged) and 6 x 4 (3 x 2)
    two = vlm.server_request(
        processor, f"w10 {VISION} w11 w12 {VISION} w13", [vlm.picture(1), vlm.picture(2, 90, 40)]
    )
    assert [tuple(x.extras["image_grid_thw"][0]) for x in two[1]] == [(1, 4, 6), (1, 6, 4)]
    text = vlm.server_request(processor, "w5 w6 w7 w8 w9 w20", [])
    expected = [vlm.expected(reference, r[2]) for r in (one, two, text)]
    assert vlm.run(engine, [one]) == expected[:1]
    assert vlm.run(engine, [one, two, text]) == expected  # `one` again: its blocks come from the prefix cache
    assert vlm.nothing_kept(engine, positions=True)


def test_an_image_split_by_chunked_prefill_matches_transformers(checkpoint, processor, reference):
    engine = vlm.engine(checkpoint, max_batch_prefill_tokens=4, prefix_caching=False)
    request = vlm.server_request(processor, f"w5 w6 {VISION} w8 w9", [vlm.picture(3)])
    (image,) = request[1]
    assert image.offset % 4 and image.num_tokens > 4  # across three chunks
    assert vlm.run(engine, [request]) == [vlm.expected(reference, request[2])]
    assert engine.runner.images.num_encoded == 1
    assert vlm.nothing_kept(engine, positions=True)


def test_preemption_recomputes_the_positions(checkpoint, processor, reference):
    # room for one request's prompt and output at a time: the second preempts and recomputes the first
    engine = vlm.engine(
        checkpoint, max_batch_total_tokens=28, max_total_tokens=20, max_batch_prefill_tokens=20,
        prefix_caching=False,
    )  # fmt: skip
    a = vlm.server_request(processor, f"w5 w6 {VISION} w7 w8 w9 w20", [vlm.picture(6)])
    b = vlm.server_request(processor, f"w30 {VISION} w31 w32 w33", [vlm.picture(7)])
    expected = [vlm.expected(reference, r[2]) for r in (a, b)]
    assert vlm.run(engine, [a, b]) == expected
    assert engine.stats().num_preemptions >= 1
    assert engine.runner.images.num_encoded >= 3
    assert vlm.nothing_kept(engine, positions=True)


def test_the_prefix_cache_shares_blocks_of_the_same_image_only(checkpoint, processor, reference):
    engine = vlm.engine(checkpoint)
    text = f"w5 w6 w7 w8 w9 w10 w11 w12 {VISION} w13 w14 w15 w16 w17 w18 w19"
    cat = vlm.server_request(processor, text, [vlm.picture(4)])
    dog = vlm.server_request(processor, text, [vlm.picture(5)])
    assert cat[0] == dog[0]  # the same prompt tokens
    vlm.run(engine, [cat])
    tokens, hits = vlm.run_counting_hits(engine, dog)
    assert tokens == vlm.expected(reference, dog[2])
    assert hits == 8  # the two blocks of text before the vision start token
    tokens, hits = vlm.run_counting_hits(engine, cat)
    assert tokens == vlm.expected(reference, cat[2])  # decodes continue from the delta
    assert hits == 4 * ((len(cat[0]) - 1) // 4)


def test_plain_positions_would_give_other_tokens(checkpoint, processor, reference):
    engine = vlm.engine(checkpoint)
    request = vlm.server_request(
        processor, f"w10 {VISION} w11 w12 {VISION} w13", [vlm.picture(1), vlm.picture(2, 90, 40)]
    )
    engine.runner.request_positions = None  # the runner's plain [T] positions
    assert vlm.run(engine, [request]) != [vlm.expected(reference, request[2])]


def test_what_the_model_does_not_implement_is_refused_by_name(checkpoint):
    from tgi.core.models.registry import UnsupportedModelError, attention_layer_specs

    config = vlm.checked_config(checkpoint, "tgi.core.models.qwen2_vl")
    config.text_config.rope_parameters = dict(config.text_config.rope_parameters, mrope_section=[2, 2, 2])
    with pytest.raises(UnsupportedModelError, match=r"mrope_section \[2, 2, 2\] must be three runs summing"):
        attention_layer_specs(config)
