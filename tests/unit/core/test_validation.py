"""A request is validated once, by the engine, with its defaults resolved (`tgi.core.validation`)."""

from __future__ import annotations

import dataclasses

import pytest

from tgi.core import engine as engine_module
from tgi.core.async_engine import AsyncEngine
from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.guided import Grammar
from tgi.core.interfaces import RunnerCapabilities, RunnerConstraints
from tgi.core.request import EngineRequest, ValidationError
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.model import write_tiny_llama
from tgi.core.validation import EMPTY_INPUTS, RequestLimits, check_prediction, validate_request

LIMITS = RequestLimits(max_input_tokens=64, max_total_tokens=128, vocab_size=1000)


def test_max_new_tokens_none_is_what_is_left_of_max_total():
    params = validate_request([1] * 60, SamplingParams(max_new_tokens=None), LIMITS)
    assert params.max_new_tokens == 68
    # at least one, so that a too long prompt is refused by its length, not by max_new_tokens
    with pytest.raises(ValidationError, match=r"must be <= 128\. Given: 128 `inputs` tokens and 1 "):
        validate_request([1] * 128, SamplingParams(max_new_tokens=None), LIMITS)


def test_an_explicit_max_new_tokens_is_kept():
    params = SamplingParams(max_new_tokens=5, temperature=0.5, do_sample=True)
    assert validate_request([1, 2], params, LIMITS) == params


def test_min_new_tokens_is_checked_against_the_resolved_max():
    limits = dataclasses.replace(LIMITS, max_input_tokens=127)
    assert validate_request([1] * 120, SamplingParams(max_new_tokens=None, min_new_tokens=8), limits)
    with pytest.raises(ValidationError, match="`min_new_tokens` must be >= 0 and <= `max_new_tokens`"):
        validate_request([1] * 121, SamplingParams(max_new_tokens=None, min_new_tokens=8), limits)


def test_tgi_order_ranges_then_empty_then_lengths_then_token_ids():
    with pytest.raises(ValidationError, match=r"^`temperature` must be strictly positive$"):
        validate_request([], SamplingParams(temperature=0.0), LIMITS)
    with pytest.raises(ValidationError, match=f"^{EMPTY_INPUTS}$"):
        validate_request([], SamplingParams(), LIMITS)
    with pytest.raises(ValidationError, match=r"^`inputs` tokens \+ `max_new_tokens` must be <= 128"):
        validate_request([5000] * 100, SamplingParams(max_new_tokens=50), LIMITS)
    with pytest.raises(ValidationError, match=r"^token ids must be in \[0, 1000\)$"):
        validate_request([1, 1000], SamplingParams(), LIMITS)


def test_every_broken_length_limit_is_named_total_first():
    with pytest.raises(ValidationError) as only_input:
        validate_request([1] * 100, SamplingParams(max_new_tokens=10), LIMITS)
    assert str(only_input.value) == (
        "`inputs` must have less than 64 tokens. Given: 100 (`inputs` tokens must be <= 64)"
    )
    with pytest.raises(ValidationError) as both:
        validate_request([1] * 100, SamplingParams(max_new_tokens=50), LIMITS)
    assert str(both.value) == (
        "`inputs` tokens + `max_new_tokens` must be <= 128. Given: 100 `inputs` tokens and 50 "
        "`max_new_tokens`; `inputs` must have less than 64 tokens. Given: 100 (`inputs` tokens must be <= 64)"
    )


@pytest.fixture(scope="module")
def tiny_engine(tmp_path_factory):
    model = write_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))
    return LLMEngine.from_config(
        EngineConfig(model_id=str(model), backend="cpu", dtype="float32", max_total_tokens=64,
                     max_batch_total_tokens=256, max_batch_prefill_tokens=64)
    )  # fmt: skip


async def test_the_async_engine_validates_a_request_once(tiny_engine, monkeypatch):
    calls = []

    def counting(*args):
        calls.append(args)
        return validate_request(*args)

    monkeypatch.setattr(engine_module, "validate_request", counting)
    engine = AsyncEngine(tiny_engine)
    await engine.start()
    try:
        result = await engine.generate([5, 6, 7], SamplingParams(max_new_tokens=None, ignore_eos=True))
        assert len(calls) == 1  # on the event loop; the engine thread adds what was validated
        assert len(result.token_ids) == 64 - 3  # the default filled what max_total_tokens leaves
        with pytest.raises(ValidationError, match="must be <= 64"):
            engine.stream([5] * 60, SamplingParams(max_new_tokens=10))
    finally:
        await engine.shutdown()


def test_llm_engine_add_request_validates(tiny_engine):
    with pytest.raises(ValidationError, match=EMPTY_INPUTS):
        tiny_engine.add_request([], SamplingParams())
    request_id = tiny_engine.add_request([5, 6], dataclasses.replace(SamplingParams(), max_new_tokens=None))
    assert tiny_engine.scheduler.has_unfinished()
    tiny_engine.abort(request_id)


def test_the_grammar_compiler_is_called_from_one_place():
    """`LLMEngine.compile_grammar` alone calls the compiler, and `LLMEngine.validate` alone calls it, in the
    engine and in the server: a request's grammar is compiled by its one validation, nowhere else."""
    import re
    from pathlib import Path

    import tgi.core
    import tgi.server

    calls = re.compile(r"(\.compile_grammar|_grammars\.compile)\(")
    found = [
        f"{path.name}: {line.strip()}"
        for package in (tgi.core, tgi.server)
        for path in sorted(Path(package.__file__).parent.rglob("*.py"))
        for line in path.read_text().splitlines()
        if calls.search(line)
    ]
    assert found == [
        "engine.py: grammar = None if params.grammar is None else self.compile_grammar(params.grammar)",
        "engine.py: return self._grammars.compile(grammar)",
    ]


def test_validate_makes_the_request_the_engine_adds(tiny_engine):
    request = tiny_engine.validate([5, 6], SamplingParams(max_new_tokens=None))
    assert isinstance(request, EngineRequest) and request.grammar is None
    assert request.prompt_token_ids == (5, 6) and request.params.max_new_tokens == 64 - 2
    request_id = tiny_engine.add_validated_request(request)
    assert tiny_engine.scheduler.has_unfinished()
    tiny_engine.abort(request_id)
    assert not tiny_engine.has_unfinished()
    # a grammar that is not the one carried compiled cannot reach the engine
    with pytest.raises(ValueError, match="must carry it compiled"):
        EngineRequest((5, 6), SamplingParams(grammar=Grammar.regex("a+")))


def test_a_prediction_is_carried_in_the_request_or_refused_by_name(tiny_engine):
    request = tiny_engine.validate([5, 6], SamplingParams(max_new_tokens=4), prediction=[7, 8])
    assert request.prediction == (7, 8)
    with pytest.raises(ValidationError, match=r"`prediction` token ids must be in \[0, 256\)"):
        tiny_engine.validate([5, 6], SamplingParams(max_new_tokens=4), prediction=[7, 256])
    with pytest.raises(ValidationError, match=r"`prediction` must have at most 64 tokens .*Given: 65"):
        tiny_engine.validate([5, 6], SamplingParams(max_new_tokens=4), prediction=[7] * 65)
    # what a runner of static shapes declares (the TPU's, Neuron's): its guesses could not be verified
    static = RunnerConstraints(chunked_prefill=False, mixed_batches=False)
    with pytest.raises(
        ValidationError,
        match="the tpu backend's runner lacks verification of several tokens per "
        "sequence, chunked prefill, mixed batches",
    ):
        check_prediction([7], RunnerCapabilities(draft_verification=False), static, LIMITS, "tpu")
    check_prediction(
        [], RunnerCapabilities(draft_verification=False), static, LIMITS, "tpu"
    )  # none: no check


def test_images_for_a_runner_without_a_vision_tower_are_refused_by_name(tiny_engine):
    from tgi.core.request import ImageInput

    image = ImageInput(pixel_values=None, offset=1, num_tokens=2, content_hash=b"x")
    assert not tiny_engine.runner.capabilities().image_inputs
    with pytest.raises(ValidationError, match="does not take image inputs"):
        tiny_engine.validate([5, 6, 6, 7], SamplingParams(), [image])
    with pytest.raises(ValidationError, match="does not take image inputs"):  # not through validate either
        tiny_engine.add_validated_request(EngineRequest((5, 6, 6, 7), SamplingParams(), images=(image,)))
    assert not tiny_engine.has_unfinished()


def test_image_placeholder_spans_must_lie_in_the_prompt_in_order():
    from tgi.core.request import ImageInput
    from tgi.core.validation import check_image_spans

    def image(offset, n):
        return ImageInput(pixel_values=None, offset=offset, num_tokens=n, content_hash=b"x")

    check_image_spans([image(0, 2), image(2, 2)], 4)
    for images in ([image(3, 2)], [image(0, 2), image(1, 2)], [image(0, 0)]):
        with pytest.raises(ValidationError, match="placeholder tokens at offset"):
            check_image_spans(images, 4)


def test_an_image_larger_than_the_encoder_budget_per_step_is_refused_naming_the_flag():
    from tgi.core.request import ImageInput
    from tgi.core.validation import check_image_budget

    def image(n):
        return ImageInput(pixel_values=None, offset=0, num_tokens=n, content_hash=b"x")

    check_image_budget([image(576), image(576)], 576)  # each image alone fits: the scheduler spreads them
    with pytest.raises(
        ValidationError, match="image 1 has 577 image tokens; --max-encoder-tokens-per-step allows 576"
    ):
        check_image_budget([image(4), image(577)], 576)


def test_an_image_longer_than_the_largest_chunk_is_refused_where_images_are_atomic():
    from tgi.core.request import ImageInput
    from tgi.core.validation import check_atomic_images

    def image(n):
        return ImageInput(pixel_values=None, offset=0, num_tokens=n, content_hash=b"x")

    check_atomic_images([image(4096)], None)  # images split across chunks: any length
    check_atomic_images([image(64), image(64)], 64)
    with pytest.raises(ValidationError, match=r"image 1 has 65 image tokens; .* the largest is 64 tokens"):
        check_atomic_images([image(4), image(65)], 64)
