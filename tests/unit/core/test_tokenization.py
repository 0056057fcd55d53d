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
    """The count runs in Rust with the GIL released: a Python thread beside it goes on running while the count
    is in progress (the tokenizer's own `encode` would hold the GIL for the whole ~0.5 s). Shown by what that
    thread saw, not by two clocks: how many of its 1 ms ticks found the count in progress. With the GIL held
    throughout, at most the tick that takes the GIL back as the count returns can (1-2); released, hundreds."""
    text = "hello " * 175_000
    counting = threading.Event()
    done = threading.Event()
    seen: list[int] = []

    def tick() -> None:
        while not done.is_set():
            time.sleep(0.001)  # releases the GIL, and asks for it back
            if counting.is_set():
                seen.append(1)

    ticker = threading.Thread(target=tick)
    ticker.start()
    counting.set()
    count = count_tokens(tokenizer, text)
    counting.clear()
    done.set()
    ticker.join()
    assert count == 175_001  # a token a word and the trailing space
    assert len(seen) >= 20, f"the thread beside ran {len(seen)} times while a megabyte was counted"
