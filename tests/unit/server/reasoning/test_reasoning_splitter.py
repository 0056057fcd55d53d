"""The reasoning splitter on recorded outputs of reasoning models, whole and in awkward pieces (tags cut
across pieces, one character at a time)."""

from __future__ import annotations

import random

import pytest

from tgi.server.reasoning import ReasoningDelta, ReasoningSplitter

# outputs as Qwen3 (opens `<think>` itself) and DeepSeek-R1 (its template opened it) write them
QWEN3 = (
    "<think>\nOkay, the user asks for 2 + 2. That is 4.\n</think>\n\nThe answer is **4**.",
    "Okay, the user asks for 2 + 2. That is 4.",
    "The answer is **4**.",
)
DEEPSEEK_R1 = (
    "Alright, 17 x 23: 17 x 20 = 340, 17 x 3 = 51, so 391.\n</think>\n\n17 x 23 = 391.",
    "Alright, 17 x 23: 17 x 20 = 340, 17 x 3 = 51, so 391.",
    "17 x 23 = 391.",
)


def _pieces(text: str, sizes) -> list[str]:
    out, i = [], 0
    for size in sizes:
        out.append(text[i : i + size])
        i += size
    return [*out, text[i:]]


def _streamed(splitter: ReasoningSplitter, pieces: list[str]) -> tuple[str, str, list[ReasoningDelta]]:
    deltas = [splitter.feed(p) for p in pieces] + [splitter.finish()]
    return "".join(d.reasoning for d in deltas), "".join(d.answer for d in deltas), deltas


def _chunkings(text: str):
    yield [text]
    yield list(text)  # one character at a time
    rng = random.Random(0)
    for _ in range(20):
        yield _pieces(text, [rng.randint(1, 5) for _ in range(len(text))])


@pytest.mark.parametrize("output", [QWEN3, DEEPSEEK_R1], ids=["qwen3", "deepseek_r1"])
def test_recorded_outputs_split_the_same_in_any_pieces(output):
    text, reasoning, answer = output
    inside = output is DEEPSEEK_R1
    for pieces in _chunkings(text):
        got_reasoning, got_answer, deltas = _streamed(ReasoningSplitter(starts_inside=inside), pieces)
        assert (got_reasoning.strip(), got_answer) == (reasoning, answer), pieces
        for d in deltas:  # no piece of a tag is ever given out
            assert "<" not in d.reasoning + d.answer and ">" not in d.reasoning + d.answer


def test_a_tag_cut_across_pieces_is_held_back_until_it_is_known():
    s = ReasoningSplitter(starts_inside=True)
    assert s.feed("so 4.</th") == ReasoningDelta("so 4.", "")
    assert s.feed("ink>\n\nFo") == ReasoningDelta("", "Fo")
    assert s.feed("ur") == ReasoningDelta("", "ur")
    # text that only looked like the tag's start is reasoning once it is not
    s = ReasoningSplitter(starts_inside=True)
    assert s.feed("a </t") == ReasoningDelta("a ", "")
    assert s.feed("able>") == ReasoningDelta("</table>", "")


def test_an_output_cut_short_inside_the_reasoning_is_all_reasoning():
    s = ReasoningSplitter(starts_inside=True)
    assert s.split("still thinking </thi") == ReasoningDelta("still thinking </thi", "")
    s = ReasoningSplitter()
    assert s.split("<think>still thinking") == ReasoningDelta("still thinking", "")
    assert s.reasoned


def test_without_the_start_tag_an_output_is_all_answer_unless_the_prompt_opened_it():
    s = ReasoningSplitter()
    assert s.split("Just 4. No </think> here.") == ReasoningDelta("", "Just 4. No </think> here.")
    assert not s.reasoned
    assert ReasoningSplitter().split("<thinking is fun>") == ReasoningDelta("", "<thinking is fun>")
    # a start tag written again although the prompt opened the reasoning is dropped
    assert ReasoningSplitter(starts_inside=True).split("\n<think>\nhm</think>ok") == ReasoningDelta(
        "\nhm", "ok"
    )


def test_whitespace_before_the_start_tag_is_waited_for_not_given_out():
    s = ReasoningSplitter()
    assert s.feed("\n") == ReasoningDelta()
    assert s.feed("<thi") == ReasoningDelta()
    assert s.feed("nk>x") == ReasoningDelta("x", "")
    assert s.finish() == ReasoningDelta()


def test_other_tags():
    s = ReasoningSplitter("[THINK]", "[/THINK]")
    assert s.split("[THINK]a[/THINK]b") == ReasoningDelta("a", "b")
