"""A request's grammar moved after the reasoning, compiled by the engine's own compiler for a tiny model's
byte-level tokenizer (with `<think>` and `</think>` as single tokens, as reasoning models have them, and as
text): free thinking, then the answer constrained."""

from __future__ import annotations

import pytest
from helpers.reasoning_model import THINK_TAGS, byte_tokenizer

from tgi.core.guided import Grammar
from tgi.core.guided.compiler import GrammarCompiler
from tgi.server.chat.tools import plan_tools
from tgi.server.reasoning import REASONING_FORMATS
from tgi.server.reasoning.grammar import after_reasoning

SCHEMA = Grammar.json_schema({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})
REGEX = Grammar.regex("[a-z]{2}/x")
TOOLS = plan_tools(
    [
        {
            "type": "function",
            "function": {"name": "f", "parameters": {"properties": {"q": {"type": "string"}}}},
        }
    ],
    "auto",
).grammar
ANSWERS = {
    "schema": (SCHEMA, '{"a": 1}'),
    "regex": (REGEX, "ab/x"),
    "tools": (TOOLS, '{"name": "f", "arguments": {"q": "x"}}'),
}


@pytest.fixture(scope="module", params=["tags-are-tokens", "tags-are-text"])
def compiler(request):
    tokens = request.param == "tags-are-tokens"
    tokenizer = byte_tokenizer(THINK_TAGS if tokens else ())
    return (
        GrammarCompiler(tokenizer, len(tokenizer), [1]),
        tokenizer,
        frozenset(THINK_TAGS) if tokens else frozenset(),
    )


def _accepts(compiler, grammar: Grammar, text: str) -> bool:
    compiled, tokenizer, _ = compiler
    matcher = compiled.compile(grammar).new_matcher()
    return matcher.consume_tokens(tokenizer.encode(text)) and matcher.is_accepting()


@pytest.mark.parametrize("kind", list(ANSWERS))
def test_the_thinking_is_free_and_the_answer_after_it_is_constrained(compiler, kind):
    grammar, answer = ANSWERS[kind]
    wrapped = after_reasoning(grammar, REASONING_FORMATS["deepseek_r1"], True, compiler[2])
    assert _accepts(compiler, wrapped, f'Hm, {{"a": "no"}} <b>?\n</think>\n\n{answer}')
    assert _accepts(compiler, wrapped, f"<think>again</think>{answer}")  # the open tag written again
    assert not _accepts(compiler, wrapped, answer)  # the prompt opened the reasoning: it must end
    assert not _accepts(compiler, wrapped, f"x</think>{answer}</think>")
    if kind != "tools":  # (`tool_choice: auto` allows a text answer)
        assert not _accepts(compiler, wrapped, "x</think>not the answer")
        assert not _accepts(compiler, grammar, f"x</think>{answer}")  # (alone it has no reasoning)


@pytest.mark.parametrize("kind", ["schema", "regex"])
def test_a_model_that_opens_its_own_reasoning_may_also_answer_at_once(compiler, kind):
    grammar, answer = ANSWERS[kind]
    wrapped = after_reasoning(grammar, REASONING_FORMATS["qwen3"], False, compiler[2])
    assert _accepts(compiler, wrapped, f"\n<think>\nfree {{ text</think>\n\n{answer}")
    assert _accepts(compiler, wrapped, answer)
    assert not _accepts(compiler, wrapped, f"free text</think>{answer}")  # not opened: it is the answer
