"""A request's text as vLLM's detokenizer makes it, through a real engine on a tiny random Llama: special
tokens shown only with `skip_special_tokens=False` (adjacent ones without a space between them with
`spaces_between_special_tokens=False`), and the token that ended the sequence (EOS, a stop token
id) left out of the text unless `include_stop_str_in_output`. A logit bias of 100 makes the model emit the
token each check needs, far from any tie."""

from __future__ import annotations

import pytest

from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.request import FinishReason
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.model import write_tiny_llama

UNK, EOS, WORD = 0, 1, 9  # the tiny tokenizer's <unk> (special, no stop), </s> (its EOS), and "w9"
PROMPT = [5, 6, 7]


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    model = write_tiny_llama(tmp_path_factory.mktemp("tiny-llama"))
    return LLMEngine.from_config(
        EngineConfig(model_id=str(model), backend="cpu", dtype="float32", max_total_tokens=64,
                     max_batch_total_tokens=256, max_batch_prefill_tokens=64)
    )  # fmt: skip


def _final(engine, **params):
    [result] = engine.generate([PROMPT], SamplingParams(max_new_tokens=3, **params))
    return result.final.generated_text, result.final.finish_reason, "".join(e.text for e in result.events)


def _after_prompt(engine, ids: list[int]) -> str:
    """The text `ids` add after the prompt, special tokens shown (this tokenizer puts a space before each)."""
    decode = engine.tokenizer.decode
    return decode(PROMPT + ids, skip_special_tokens=False)[len(decode(PROMPT)) :]


def test_special_tokens_are_shown_only_when_asked(engine):
    bias = {"logit_bias": ((UNK, 100.0),)}
    assert _final(engine, **bias) == ("", FinishReason.LENGTH, "")
    shown = _after_prompt(engine, [UNK] * 3)
    assert shown == " <unk> <unk> <unk>"
    assert _final(engine, skip_special_tokens=False, **bias) == (shown, FinishReason.LENGTH, shown)
    # vLLM's spaces_between_special_tokens=False: no space between two added tokens, only before the first
    joined = _final(engine, skip_special_tokens=False, spaces_between_special_tokens=False, **bias)
    assert joined == (" <unk><unk><unk>", FinishReason.LENGTH, " <unk><unk><unk>")


@pytest.mark.parametrize(
    ("token", "params"),
    [(EOS, {"skip_special_tokens": False}), (WORD, {"stop_token_ids": (WORD,)})],
)
def test_the_token_that_ends_the_sequence_is_text_only_when_asked(engine, token, params):
    bias = {"logit_bias": ((token, 100.0),), **params}
    assert _final(engine, **bias) == ("", FinishReason.EOS, "")
    text = _after_prompt(engine, [token])
    assert _final(engine, include_stop_str_in_output=True, **bias) == (text, FinishReason.EOS, text)
