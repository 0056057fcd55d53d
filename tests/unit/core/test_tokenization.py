"""`count_tokens`: the count transformers' own call gives, taken without holding the GIL."""

from __future__ import annotations

import threading
import time

import pytest

from tgi.core.loading.resolve import resolve_model
from tgi.core.tokenization import count_tokens, load_tokenizer

TEXTS = [
    "",
    "Hello, world!",
    "hello " * 300,
    "naïve café — 東京 🙂 \t\n  spaces",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",  # special tokens written as text
]


@pytest.fixture()
def tokenizer():
    return load_tokenizer(resolve_model(None))  # the default model's (a fresh object: tests change its state)


@pytest.mark.parametrize("add_special_tokens", [True, False])
@pytest.mark.parametrize("text", TEXTS)
def test_the_count_is_the_length_of_what_transformers_gives(tokenizer, text, add_special_tokens):
    expected = len(tokenizer(text, add_special_tokens=add_special_tokens)["input_ids"])
    assert count_tokens(tokenizer, text, add_special_tokens) == expected


def test_the_count_follows_split_special_tokens(tokenizer):
    text = TEXTS[-1]
    whole = count_tokens(tokenizer, text)
    tokenizer.split_special_tokens = True
    split = count_tokens(tokenizer, text)
    assert split == len(tokenizer(text)["input_ids"])
    assert split > whole  # each `<|im_start|>` is now several tokens
    tokenizer.split_special_tokens = False
    assert count_tokens(tokenizer, text) == whole


def test_another_thread_runs_while_a_megabyte_is_counted(tokenizer):
    """The count runs in Rust with the GIL released: a Python thread beside it keeps its pace (the tokenizer's
    own `encode` would hold the GIL for the whole ~0.5 s)."""
    text = "hello " * 175_000
    gaps: list[float] = []
    done = threading.Event()

    def tick() -> None:
        last = time.monotonic()
        while not done.is_set():
            time.sleep(0.001)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticker = threading.Thread(target=tick)
    ticker.start()
    time.sleep(0.02)
    start = time.monotonic()
    count = count_tokens(tokenizer, text)
    took = time.monotonic() - start
    done.set()
    ticker.join()
    assert count == 175_001  # a token a word and the trailing space
    assert max(gaps) < took / 4, f"the thread beside stalled {max(gaps) * 1000:.0f} ms of {took * 1000:.0f}"
