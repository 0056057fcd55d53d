"""Grammars a request may give besides a schema or a regex: a context-free grammar in Lark or llama.cpp's
GBNF, and vLLM's structural tags (free text, JSON under a schema after a trigger), checked by what the
compiled grammar accepts, on a byte-level tokenizer (every text has exactly one tokenization)."""

from __future__ import annotations

import pytest
from helpers.reasoning_model import byte_tokenizer

from tgi.core.guided import Grammar, GrammarError, StructuralTag
from tgi.core.guided.compiler import GrammarCompiler

YES_NO_GBNF = 'root ::= answer "."\nanswer ::= "yes" | "no"'
YES_NO_LARK = 'start: answer "."\nanswer: "yes" | "no"'
CALL = StructuralTag(
    begin="<call=get_weather>",
    schema={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    end="</call>",
    triggers=("<call=",),
)


@pytest.fixture(scope="module")
def compiler():
    tokenizer = byte_tokenizer(())
    return GrammarCompiler(tokenizer, len(tokenizer), [1]), tokenizer


def _accepts(compiler, grammar: Grammar, text: str) -> bool:
    compiled, tokenizer = compiler
    matcher = compiled.compile(grammar).new_matcher()
    return matcher.consume_tokens(tokenizer.encode(text)) and matcher.is_accepting()


@pytest.mark.parametrize("text", [YES_NO_GBNF, YES_NO_LARK], ids=["gbnf", "lark"])
def test_a_context_free_grammar_in_either_dialect(compiler, text):
    grammar = Grammar.cfg(text)
    assert grammar.kind == "lark"
    assert _accepts(compiler, grammar, "yes.") and _accepts(compiler, grammar, "no.")
    assert not _accepts(compiler, grammar, "maybe.") and not _accepts(compiler, grammar, "yes")


@pytest.mark.parametrize("text", ["", "   ", "root ::= (((", 'start: "a" ('])
def test_a_grammar_that_is_neither_dialect_is_refused(compiler, text):
    with pytest.raises(GrammarError):
        compiler[0].compile(Grammar.cfg(text))


def test_a_structural_tag_leaves_text_free_and_constrains_what_follows_a_trigger(compiler):
    grammar = Grammar.structural_tags([CALL])
    assert _accepts(compiler, grammar, "Any text at all, {not json} <b>.")
    assert _accepts(compiler, grammar, 'Let me look. <call=get_weather>{"city": "Paris"}</call> Done.')
    assert _accepts(
        compiler, grammar, '<call=get_weather>{"city": "a"}</call><call=get_weather>{"city": "b"}</call>'
    )
    assert not _accepts(compiler, grammar, "Look: <call=get_weather>Paris</call>")  # not JSON
    assert not _accepts(compiler, grammar, '<call=get_weather>{"town": "Paris"}</call>')  # closed schema
    assert not _accepts(compiler, grammar, "<call=get_time>{}</call>")  # the trigger starts a structure


def test_a_structure_must_begin_with_a_trigger():
    with pytest.raises(GrammarError, match="none of the triggers"):
        Grammar.structural_tags([StructuralTag("<tool>", {}, "</tool>", ("<call=",))])
    with pytest.raises(GrammarError, match="at least one"):
        Grammar.structural_tags([])
