"""Gemma 3 with images through `LLMEngine` on the CPU backend against transformers'
`Gemma3ForConditionalGeneration` on the same random weights (float32, greedy): one image, two images, a
batch with a text-only request, a chunk budget that would split the image (the chunk is cut before it),
preemption; and the bidirectional mask among an image's tokens is what makes the tokens equal (causal
attention gives transformers' tokens without `token_type_ids`, which differ)."""

from __future__ import annotations

import hashlib

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import vlm_parity as vlm  # noqa: E402

from tgi.core.request import ImageInput, ValidationError  # noqa: E402
from tgi.core.sampling_params import SamplingParams  # noqa: E402
from tgi.core.testing.tiny_gemma3 import BOI, TOKENS_PER_IMAGE, save_random_gemma3  # noqa: E402


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory):
    return save_random_gemma3(tmp_path_factory.mktemp("tiny-gemma3"))


@pytest.fixture(scope="module")
def processor(gemma3):
    return transformers.AutoProcessor.from_pretrained(gemma3)


@pytest.fixture(scope="module")
def reference(gemma3):
    return transformers.Gemma3ForConditionalGeneration.from_pretrained(gemma3, dtype=torch.float32).eval()


def _picture(seed: int):
    return vlm.pil_picture(seed, 40, 40)


def _request(processor, text: str, pictures: list):
    """(prompt token ids, the `ImageInput`s, the processor's tensors for transformers): each image's run of
    placeholders is where the processor's `token_type_ids` are 1."""
    enc = processor(images=[pictures] if pictures else None, text=text, return_tensors="pt")
    ids = enc["input_ids"][0].tolist()
    types = enc["token_type_ids"][0].tolist()
    starts = [i for i, t in enumerate(types) if t == 1 and (i == 0 or types[i - 1] == 0)]
    assert len(starts) == len(pictures)
    images = [
        ImageInput(
            pixel_values=enc["pixel_values"][k].numpy(),
            offset=start,
            num_tokens=TOKENS_PER_IMAGE,
            content_hash=hashlib.sha256(picture.tobytes()).digest(),
        )
        for k, (start, picture) in enumerate(zip(starts, pictures, strict=True))
    ]
    return ids, images, enc


def _expected(reference, enc, mask: bool = True) -> list[int]:
    """transformers' tokens, its image tokens' mask left out (so causal) where not `mask`."""
    return vlm.expected(reference, enc if mask else {k: v for k, v in enc.items() if k != "token_type_ids"})


@pytest.fixture(scope="module")
def engine(gemma3):
    return vlm.engine(gemma3)


def test_one_image_two_images_and_a_mixed_batch_match_transformers(engine, processor, reference):
    assert engine.model_info.architecture == "Gemma3ForConditionalGeneration"
    assert engine.runner.capabilities().image_inputs and engine.runner.constraints().atomic_images
    one = _request(processor, f"w5 w6 {BOI} w7 w8 w9", [_picture(0)])
    two = _request(processor, f"w10 {BOI} w11 w12 {BOI} w13", [_picture(1), _picture(2)])
    text = _request(processor, "w5 w6 w7 w8 w9 w20", [])
    expected = [_expected(reference, r[2]) for r in (one, two, text)]
    assert vlm.run(engine, [(one[0], one[1])]) == expected[:1]
    assert vlm.run(engine, [(one[0], one[1]), (two[0], two[1]), (text[0], ())]) == expected


def test_without_the_bidirectional_mask_the_tokens_differ(gemma3, processor, reference):
    engine = vlm.engine(gemma3)
    requests = [
        _request(processor, f"w5 w6 {BOI} w7 w8 w9", [_picture(0)]),
        _request(processor, f"w10 {BOI} w11 w12 {BOI} w13", [_picture(1), _picture(2)]),
    ]
    masked = [_expected(reference, r[2]) for r in requests]
    causal = [_expected(reference, r[2], mask=False) for r in requests]
    assert masked != causal  # the mask shows in the greedy tokens of these prompts
    engine.runner.bidirectional_images = False  # the image's tokens then attend causally
    assert vlm.run(engine, [(r[0], r[1]) for r in requests]) == causal


def test_a_chunk_that_would_split_the_image_is_cut_before_it(gemma3, processor, reference):
    engine = vlm.engine(gemma3, max_batch_prefill_tokens=TOKENS_PER_IMAGE + 1, prefix_caching=False)
    ids, images, enc = _request(processor, f"w5 w6 w7 {BOI} w8 w9", [_picture(3)])
    offset = images[0].offset
    assert offset % (TOKENS_PER_IMAGE + 1) and offset + TOKENS_PER_IMAGE > TOKENS_PER_IMAGE + 1  # it would
    chunks = []
    step = engine.runner.execute

    def spy(batch):
        chunks.extend((s.start_pos, len(s.token_ids)) for s in batch.sequences if s.is_prefill)
        return step(batch)

    engine.runner.execute = spy
    assert vlm.run(engine, [(ids, images)]) == [_expected(reference, enc)]
    assert (offset, TOKENS_PER_IMAGE + 1) in chunks  # the first chunk stopped at the image, the next holds it
    assert chunks[0] == (0, offset)


def test_an_image_longer_than_the_largest_chunk_is_a_validation_error(gemma3, processor):
    """Gemma 3 feeds an image in one chunk: one longer than the largest is refused when the request is
    validated (TGI's 422), before anything is queued."""
    engine = vlm.engine(gemma3, max_batch_prefill_tokens=TOKENS_PER_IMAGE - 1, prefix_caching=False)
    ids, images, _ = _request(processor, f"w5 {BOI} w8", [_picture(3)])
    with pytest.raises(
        ValidationError, match=f"image 0 has {TOKENS_PER_IMAGE} image tokens; this model feeds"
    ):
        engine.validate(ids, SamplingParams(max_new_tokens=2), images)
    assert not engine.has_unfinished()


def test_preemption_recomputes_with_the_mask(gemma3, processor, reference):
    # room for one request's prompt and output at a time: the second preempts and recomputes the first
    engine = vlm.engine(
        gemma3,
        max_batch_total_tokens=28,
        max_total_tokens=20,
        max_batch_prefill_tokens=20,
        prefix_caching=False,
    )
    a = _request(processor, f"w5 w6 {BOI} w7 w8 w9 w20", [_picture(6)])
    b = _request(processor, f"w30 {BOI} w31 w32 w33", [_picture(7)])
    expected = [_expected(reference, r[2]) for r in (a, b)]
    assert vlm.run(engine, [(a[0], a[1]), (b[0], b[1])]) == expected
    assert engine.stats().num_preemptions >= 1


def test_the_prefix_cache_stops_before_an_image_it_would_end_inside(gemma3, processor, reference):
    engine = vlm.engine(gemma3)
    ids, images, enc = _request(processor, f"w5 w6 w7 w8 w9 {BOI} w11", [_picture(8)])
    assert images[0].offset < 8 < images[0].offset + TOKENS_PER_IMAGE  # two cached blocks would end inside
    expected = [_expected(reference, enc)]
    assert vlm.run(engine, [(ids, images)]) == expected
    before = engine.stats().num_prefix_cache_hit_tokens
    assert vlm.run(engine, [(ids, images)]) == expected
    assert engine.stats().num_prefix_cache_hit_tokens - before == 4  # the block before the image only


def test_an_attention_that_cannot_mask_the_spans_refuses_the_model_by_name(gemma3):
    from tgi.core.interfaces import UnsupportedError

    # --deterministic: cpu-native's batch-invariant prefill runs every query as a causal decode row
    with pytest.raises(UnsupportedError, match="attend to each other both ways at prefill"):
        vlm.engine(gemma3, deterministic=True)
