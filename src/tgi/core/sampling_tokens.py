"""Request strings the sampler reads as token ids, tokenized where requests are validated (no torch here):
vLLM's `bad_words` (`bad_words_ids`) and llama.cpp's DRY sequence breakers (`dry_sequence_breaker_ids`).

`tokenizer` is a transformers tokenizer (`encode(text, add_special_tokens=False)`, `decode(ids)`,
`batch_decode`, `len()`). A breaker's token sequences come from a scan of the whole vocabulary, done once
per tokenizer and breaker string and kept while the tokenizer lives.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import Any

#: llama.cpp's default `dry_sequence_breakers` (a request with DRY and no breakers of its own gets these)
DEFAULT_DRY_SEQUENCE_BREAKERS = ("\n", ":", '"', "*")
#: llama.cpp reads at most this many characters of a breaker, and at most this many tokens after its head
MAX_DRY_BREAKER_CHARS = 40
MAX_DRY_BREAKER_TAIL = 20

_lock = threading.Lock()
_texts: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> each token's text
_breakers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> {breaker: sequences}


def bad_words_ids(tokenizer: Any, words: Sequence[str]) -> tuple[tuple[int, ...], ...]:
    """vLLM's tokenization of `bad_words`: each word without its leading spaces, then with one space before
    it (a word in the middle of a text); the second is kept when it starts with another token and has as
    many tokens as the first (a new word token, not the same one split). `ValueError` naming the field for
    a blank word."""
    out: list[tuple[int, ...]] = []
    for word in words:
        text = word.lstrip()
        if not text:
            raise ValueError("`bad_words` must not hold empty or blank words")
        alone = tuple(tokenizer.encode(text, add_special_tokens=False))
        spaced = tuple(tokenizer.encode(" " + text, add_special_tokens=False))
        out.append(alone)
        if spaced and spaced[0] != alone[0] and len(spaced) == len(alone):
            out.append(spaced)
    return tuple(out)


def dry_sequence_breaker_ids(
    tokenizer: Any, breakers: Sequence[str] = DEFAULT_DRY_SEQUENCE_BREAKERS
) -> tuple[tuple[int, ...], ...]:
    """llama.cpp's token sequences for DRY's `breakers` (strings): for each breaker (its first
    `MAX_DRY_BREAKER_CHARS` characters), every token whose text holds it is a breaker alone (a one-token
    sequence), and every token whose text ends with the breaker's beginning is a head followed by the
    tokens of the breaker's rest (at most `MAX_DRY_BREAKER_TAIL`); duplicates once. `ValueError` naming the
    field for an empty breaker."""
    out: dict[tuple[int, ...], None] = {}
    for breaker in breakers:
        if not breaker:
            raise ValueError("`dry_sequence_breakers` must not hold empty strings")
        for seq in _breaker_sequences(tokenizer, breaker[:MAX_DRY_BREAKER_CHARS]):
            out.setdefault(seq, None)
    return tuple(out)


def _breaker_sequences(tokenizer: Any, breaker: str) -> tuple[tuple[int, ...], ...]:
    with _lock:
        cache = _breakers.setdefault(tokenizer, {})
        found = cache.get(breaker)
    if found is None:
        found = _scan(tokenizer, breaker)
        with _lock:
            cache[breaker] = found
    return found


def _scan(tokenizer: Any, breaker: str) -> tuple[tuple[int, ...], ...]:
    seqs: dict[tuple[int, ...], None] = {}  # in order, each once
    for token, text in enumerate(_token_texts(tokenizer)):
        if breaker in text:
            seqs[(token,)] = None
            continue
        # the text ends with the breaker's first k characters: the rest follows in other tokens
        for k in range(min(len(text), len(breaker) - 1), 0, -1):
            if text.endswith(breaker[:k]):
                tail = tuple(tokenizer.encode(breaker[k:], add_special_tokens=False))[:MAX_DRY_BREAKER_TAIL]
                seqs.setdefault((token, *tail), None)
    return tuple(seqs)


def _token_texts(tokenizer: Any) -> list[str]:
    """Each token's text, decoded alone (special tokens as their text), built once per tokenizer."""
    with _lock:
        texts = _texts.get(tokenizer)
    if texts is None:
        texts = tokenizer.batch_decode([[t] for t in range(len(tokenizer))], skip_special_tokens=False)
        with _lock:
            _texts[tokenizer] = texts
    return texts
