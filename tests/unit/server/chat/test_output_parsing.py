"""The parsers a request goes through and what they change before generation: where the reasoning
starts, and a grammar moved after it (or left alone when the prompt closed the reasoning)."""

from __future__ import annotations

from tgi.core.guided import Grammar
from tgi.core.sampling_params import SamplingParams
from tgi.server.chat.parsers import OutputParsers, reasoned_prompt, resolve

QWEN3 = "{% for m in messages %}{{ m.content.split('</think>')[-1] }}{% endfor %}<tool_call>"
SCHEMA = Grammar.json_schema({"type": "object"})


def test_resolve_reads_the_flags_against_the_template():
    parsers = resolve("auto", "auto", QWEN3)
    assert parsers.reasoning.name == "qwen3" and parsers.tool_format.name == "hermes" and parsers.active
    assert not resolve(None, None, QWEN3).active
    assert not resolve("auto", "auto", "{{ messages }}").active


def test_the_grammar_moves_after_the_reasoning_the_prompt_opened():
    parsers = resolve("qwen3", None, QWEN3)
    opened, params = reasoned_prompt(
        parsers, "assistant\n<think>\n", SamplingParams(grammar=SCHEMA), frozenset()
    )
    assert opened.inside and params.grammar.kind == "lark"
    assert r"<\/think>/" in params.grammar.source and "%json" in params.grammar.source
    free, params = reasoned_prompt(parsers, "assistant\n", SamplingParams(grammar=SCHEMA), frozenset(THINK))
    assert not free.inside and params.grammar.kind == "lark" and "tgi_answer |" in params.grammar.source


def test_a_prompt_that_closed_the_reasoning_keeps_the_grammar_on_the_whole_output():
    parsers = resolve("qwen3", None, QWEN3)
    closed, params = reasoned_prompt(
        parsers, "assistant\n<think>\n\n</think>\n\n", SamplingParams(grammar=SCHEMA), frozenset()
    )
    assert params.grammar == SCHEMA and not closed.inside
    r1 = resolve("deepseek_r1", None, QWEN3)  # reasons from the start, unless the prompt closed it
    closed, params = reasoned_prompt(r1, "<think>\n\n</think>", SamplingParams(grammar=SCHEMA), frozenset())
    assert params.grammar == SCHEMA and closed.splitter().split("ok").answer == "ok"
    assert (
        reasoned_prompt(OutputParsers(), "x", SamplingParams(grammar=SCHEMA), frozenset())[1].grammar
        == SCHEMA
    )


THINK = ("<think>", "</think>")


def test_a_continued_message_is_inside_the_reasoning_only_where_it_left_one_open():
    r1 = resolve("deepseek_r1", None, QWEN3)  # would reason from the start of a new assistant turn
    answer, params = reasoned_prompt(
        r1, "<user>Hi<assistant>The answer is", SamplingParams(grammar=SCHEMA), frozenset(), continued=True
    )
    assert not answer.inside and params.grammar == SCHEMA  # a prefilled answer goes on as answer
    thinking, params = reasoned_prompt(
        r1, "<assistant><think>Let me", SamplingParams(grammar=SCHEMA), frozenset(), continued=True
    )
    assert thinking.inside and params.grammar.kind == "lark"  # the grammar waits for the reasoning's end
    closed, _ = reasoned_prompt(
        r1, "<assistant><think>x</think>So", SamplingParams(), frozenset(), continued=True
    )
    assert not closed.inside
