"""StopChecker (stop sequences on streamed text) and token-level finish reasons."""

from __future__ import annotations

import random
import time

import pytest

from tgi.core.request import FinishReason
from tgi.core.sampling_params import MAX_STOP_SEQUENCE_CHARS, SamplingParams
from tgi.core.stopping import (
    StopChecker,
    combine_finish_reasons,
    stop_sequences_allowed,
    token_finish_reason,
)


def feed(checker: StopChecker, chunks):
    return [checker.add(c) for c in chunks]


def test_no_stops_passes_everything_through():
    c = StopChecker()
    assert [r.text for r in feed(c, ["a", "b", ""])] == ["a", "b", ""]
    assert c.text == "ab" and not c.stopped and c.flush() == ""


def test_stop_spanning_tokens_is_trimmed_and_never_streamed():
    c = StopChecker(["\nUser:"])
    res = feed(c, ["Hello", " there\n", "Us", "er", ":", " more"])
    streamed = "".join(r.text for r in res)
    assert streamed == "Hello there"
    assert [r.text for r in res[:5]] == ["Hello", " there", "", "", ""]
    assert res[4].stopped and res[4].stop_sequence == "\nUser:"
    assert res[5].text == "" and res[5].stopped  # ignored after the stop
    assert c.text == "Hello there"


def test_include_stop_in_output():
    c = StopChecker(["END"], include_stop_in_output=True)
    res = feed(c, ["abc E", "NDxyz"])
    assert [r.text for r in res] == ["abc ", "END"]
    assert res[1].stopped and c.text == "abc END"


def test_hold_back_released_when_not_a_stop():
    c = StopChecker(["STOP"])
    r1 = c.add("go ST")
    assert r1.text == "go " and c.pending == "ST"
    r2 = c.add("ART")
    assert r2.text == "START" and not r2.stopped and c.pending == ""
    r3 = c.add("S")
    assert r3.text == "" and c.flush() == "S"  # finished for another reason: release it
    assert c.text == "go STARTS"


def test_stop_inside_one_chunk_and_earliest_wins():
    c = StopChecker(["bb", "a"])
    r = c.add("xxabb")
    assert r.stopped and r.stop_sequence == "a" and r.text == "xx"


def test_overlapping_prefix_hold_back():
    c = StopChecker(["aab"])
    assert c.add("aa").text == ""
    assert c.add("a").text == "a"  # "aaa": only "aa" may still start the stop
    r = c.add("b")
    assert r.stopped and c.text == "a"


def test_can_stop_false_lets_stop_through():
    c = StopChecker(["x"])
    r = c.add("axb", can_stop=False)
    assert r.text == "axb" and not r.stopped
    assert c.add("cx").stopped and c.text == "axbc"


def test_token_finish_reason():
    p = SamplingParams(max_new_tokens=5, min_new_tokens=2, stop_token_ids=(7,))
    eos = {2}
    assert token_finish_reason(2, 1, p, eos) is None  # before min_new_tokens
    assert token_finish_reason(2, 2, p, eos) is FinishReason.EOS
    assert token_finish_reason(7, 3, p, eos) is FinishReason.EOS
    assert token_finish_reason(9, 3, p, eos) is None
    assert token_finish_reason(9, 5, p, eos) is FinishReason.LENGTH
    assert token_finish_reason(2, 5, p, eos) is FinishReason.EOS  # EOS wins over length
    q = SamplingParams(max_new_tokens=5, ignore_eos=True, stop_token_ids=(7,))
    assert token_finish_reason(2, 3, q, eos) is None
    assert token_finish_reason(7, 3, q, eos) is FinishReason.EOS
    assert token_finish_reason(2, 5, q, eos) is FinishReason.LENGTH


def test_combine_and_min_tokens_gate():
    assert combine_finish_reasons(FinishReason.LENGTH, True) is FinishReason.STOP
    assert combine_finish_reasons(FinishReason.EOS, True) is FinishReason.EOS
    assert combine_finish_reasons(None, True) is FinishReason.STOP
    assert combine_finish_reasons(FinishReason.LENGTH, False) is FinishReason.LENGTH
    assert combine_finish_reasons(None, False) is None
    p = SamplingParams(max_new_tokens=5, min_new_tokens=3)
    assert not stop_sequences_allowed(2, p) and stop_sequences_allowed(3, p)


def _held_by_every_prefix(stops: tuple[str, ...], buf: str) -> int:
    """The held suffix as the definition says it: every proper prefix of every stop, tried."""
    return max(
        (k for s in stops for k in range(1, min(len(s) - 1, len(buf)) + 1) if buf.endswith(s[:k])), default=0
    )


def test_the_held_suffix_is_the_longest_one_that_could_start_a_stop():
    rng = random.Random(0)
    for _ in range(3000):
        stops = tuple("".join(rng.choice("abc") for _ in range(rng.randrange(1, 9))) for _ in range(2))
        checker, pending = StopChecker(stops), ""
        for _ in range(rng.randrange(1, 8)):  # chunks of 0 to 4 characters; whole stops let through
            buf = pending + "".join(rng.choice("abcd") for _ in range(rng.randrange(0, 5)))
            checker.add(buf[len(pending) :], can_stop=False)
            held = _held_by_every_prefix(stops, buf)
            pending = buf[len(buf) - held :] if held else ""
            assert checker.pending == pending, (stops, buf)


def test_the_longest_stop_allowed_costs_little_per_token():
    n = MAX_STOP_SEQUENCE_CHARS
    # held back at length n - 1, and never held: each prefix length tried would cost O(n) per token
    stops = ("a" * (n - 1) + "b", "b" + "a" * (n - 1), "ab" * (n // 2))
    checker = StopChecker(stops)
    t0 = time.process_time()
    for _ in range(20_000):
        checker.add("a")
    # 0.15 s on a 2-core Intel Xeon (AMX). (What made a 100,000-character stop cost seconds, each prefix
    # length sliced and compared once a held prefix broke, is refused by length above this cap.)
    assert time.process_time() - t0 < 5.0
    assert not checker.stopped and len(checker.pending) == n - 1


def test_a_stop_longer_than_the_cap_is_refused_by_length():
    assert SamplingParams(stop=("x" * MAX_STOP_SEQUENCE_CHARS,)).validate() is None
    with pytest.raises(
        ValueError, match=rf"at most {MAX_STOP_SEQUENCE_CHARS} characters long. Given: 100000"
    ):
        SamplingParams(stop=("y", "x" * 100_000)).validate()
