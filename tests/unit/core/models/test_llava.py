"""LLaVA through `LLMEngine` on the CPU backend against transformers' `LlavaForConditionalGeneration` on the
same random weights (float32, greedy): one image, two images, an image split by chunked prefill, a batch
of image and text-only requests; the prefix cache keyed by the image's content; preemption re-encoding."""

from __future__ import annotations

import hashlib

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import vlm_parity as vlm  # noqa: E402

from tgi.core.request import ImageInput, ValidationError  # noqa: E402
from tgi.core.sampling_params import SamplingParams  # noqa: E402
from tgi.core.testing.tiny_vlm import save_random_llava  # noqa: E402


@pytest.fixture(scope="module")
def llava(tmp_path_factory):
    return save_random_llava(tmp_path_factory.mktemp("tiny-llava"))


@pytest.fixture(scope="module")
def processor(llava):
    return transformers.AutoProcessor.from_pretrained(llava)


@pytest.fixture(scope="module")
def reference(llava):
    return transformers.LlavaForConditionalGeneration.from_pretrained(llava, dtype=torch.float32).eval()


def _picture(seed: int):
    return vlm.pil_picture(seed, 40, 40)


def _request(processor, text: str, pictures: list):
    """(prompt token ids, the `ImageInput`s, the processor's tensors for transformers)."""
    enc = processor(images=pictures or None, text=text, return_tensors="pt")
    ids = enc["input_ids"][0].tolist()
    image_id = processor.tokenizer.convert_tokens_to_ids("<image>")
    starts = [i for i, t in enumerate(ids) if t == image_id and (i == 0 or ids[i - 1] != image_id)]
    assert len(starts) == len(pictures)
    images = []
    for k, (start, picture) in enumerate(zip(starts, pictures, strict=True)):
        n = 0
        while start + n < len(ids) and ids[start + n] == image_id:
            n += 1
        images.append(
            ImageInput(
                pixel_values=enc["pixel_values"][k].numpy(),
                offset=start,
                num_tokens=n,
                content_hash=hashlib.sha256(picture.tobytes()).digest(),
            )
        )
    return ids, images, enc


@pytest.fixture(scope="module")
def engine(llava):
    return vlm.engine(llava)


def test_the_runner_takes_images_for_a_model_with_a_vision_tower(engine):
    assert engine.runner.capabilities().image_inputs
    assert engine.model_info.architecture == "LlavaForConditionalGeneration"


def test_one_image_two_images_and_a_mixed_batch_match_transformers(engine, processor, reference):
    one = _request(processor, "w5 w6 <image> w7 w8 w9", [_picture(0)])
    two = _request(processor, "w10 <image> w11 w12 <image> w13", [_picture(1), _picture(2)])
    text = _request(processor, "w5 w6 w7 w8 w9 w20", [])
    expected = [vlm.expected(reference, r[2]) for r in (one, two, text)]
    encoded = engine.runner.images.num_encoded
    assert vlm.run(engine, [(one[0], one[1])]) == expected[:1]
    assert vlm.run(engine, [(one[0], one[1]), (two[0], two[1]), (text[0], ())]) == expected
    # once per image per request, and not at all for the repeated one: its placeholders' blocks were cached
    assert engine.runner.images.num_encoded - encoded == 1 + 2
    assert engine.runner.images.num_kept_requests == 0  # dropped once their placeholders were prefilled
    stats = engine.stats()  # the encoder's time is counted, as a part of the steps'
    assert 0 < stats.encoder_seconds < stats.step_seconds
    assert stats.encoder_seconds == pytest.approx(engine.runner.images.encoder_seconds)


def test_an_image_split_by_chunked_prefill_is_encoded_once(llava, processor, reference):
    engine = vlm.engine(llava, max_batch_prefill_tokens=4, prefix_caching=False)
    ids, images, enc = _request(processor, "w5 w6 w7 <image> w8 w9", [_picture(3)])
    assert images[0].offset % 4 and images[0].offset // 4 != (images[0].offset + 3) // 4  # across chunks
    assert vlm.run(engine, [(ids, images)]) == [vlm.expected(reference, enc)]
    assert engine.runner.images.num_encoded == 1
    assert engine.runner.images.num_kept_requests == 0


def test_the_prefix_cache_shares_blocks_of_the_same_image_only(llava, processor):
    engine = vlm.engine(llava)
    text = "w5 w6 w7 w8 w9 w10 w11 w12 <image> w13 w14 w15 w16 w17 w18 w19"
    cat = _request(processor, text, [_picture(4)])
    dog = _request(processor, text, [_picture(5)])
    assert cat[0] == dog[0]  # the same prompt tokens
    vlm.run(engine, [(cat[0], cat[1])])
    _, hits = vlm.run_counting_hits(engine, dog)
    assert hits == 8  # the two blocks of text before the image, not one block more
    _, hits = vlm.run_counting_hits(engine, cat)
    assert hits == 4 * ((len(cat[0]) - 1) // 4)  # every full block but the last token's


def test_preemption_recomputes_the_image_embeddings(llava, processor, reference):
    # room for one request's prompt and output at a time: the second preempts and recomputes the first
    engine = vlm.engine(
        llava,
        max_batch_total_tokens=24,
        max_total_tokens=16,
        max_batch_prefill_tokens=16,
        prefix_caching=False,
    )
    a = _request(processor, "w5 w6 <image> w7 w8 w9 w20", [_picture(6)])
    b = _request(processor, "w30 <image> w31 w32 w33", [_picture(7)])
    expected = [vlm.expected(reference, r[2]) for r in (a, b)]
    assert vlm.run(engine, [(a[0], a[1]), (b[0], b[1])]) == expected
    assert engine.stats().num_preemptions >= 1
    assert engine.runner.images.num_encoded >= 3 and engine.runner.images.num_kept_requests == 0


def test_what_the_llava_model_does_not_implement_is_refused_by_name(llava):
    from tgi.core.models.registry import UnsupportedModelError, attention_layer_specs

    config = vlm.checked_config(llava, "tgi.core.models.llava")
    qwen = transformers.LlavaConfig(
        vision_config=config.vision_config, text_config=transformers.Qwen2Config(num_attention_heads=4)
    )
    with pytest.raises(UnsupportedModelError, match="qwen2 text model"):
        attention_layer_specs(qwen)


def test_a_small_encoder_budget_spreads_the_images_over_steps_with_transformers_tokens(
    llava, processor, reference
):
    engine = vlm.engine(llava, max_encoder_tokens_per_step=4)  # one 4-token image a step
    one = _request(processor, "w5 w6 <image> w7 w8 w9", [_picture(8)])
    two = _request(processor, "w10 <image> w11 w12 <image> w13", [_picture(9), _picture(10)])
    text = _request(processor, "w5 w6 w7 w8 w9 w20", [])
    expected = [vlm.expected(reference, r[2]) for r in (one, two, text)]
    params = SamplingParams(max_new_tokens=vlm.NEW_TOKENS, ignore_eos=True)
    order = [engine.add_validated_request(engine.validate(r[0], params, r[1])) for r in (one, two, text)]
    tokens: dict[str, list[int]] = {rid: [] for rid in order}
    per_step = []
    while engine.has_unfinished():
        encoded = engine.runner.images.num_encoded
        for event in engine.step():
            tokens[event.request_id].append(event.token_id)
        per_step.append(engine.runner.images.num_encoded - encoded)
    assert [tokens[rid] for rid in order] == expected
    assert max(per_step) == 1 and sum(per_step) == 3


def test_an_image_larger_than_the_encoder_budget_is_refused_by_name(llava, processor):
    engine = vlm.engine(llava, max_encoder_tokens_per_step=3)
    ids, images, _ = _request(processor, "w5 w6 <image> w7", [_picture(11)])
    with pytest.raises(
        ValidationError, match="image 0 has 4 image tokens; --max-encoder-tokens-per-step allows 3"
    ):
        engine.validate(ids, SamplingParams(max_new_tokens=2), images)
