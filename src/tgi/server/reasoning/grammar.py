"""A request's grammar moved after the reasoning: the model thinks freely, then its answer is constrained.

Guided decoding (`response_format`, `guided_*`, the tool-call grammar) constrains the answer, never the
thinking. The engine path stays one: the grammar itself starts with free text up to the end tag (a Lark
grammar for llguidance, the request's own grammar embedded after it), and the engine applies it as any
other. When the model's tokenizer has a tag as one token (Qwen3's and DeepSeek-R1's `</think>`), the grammar
names that token (llguidance's `<token>` syntax), since a token added to the vocabulary is not matched as
text; otherwise the tag is text, ending the free text at its first occurrence (a lazy lexeme).
"""

from __future__ import annotations

import json
import re

from tgi.core.guided import Grammar
from tgi.core.guided.grammar import JSON_STYLE
from tgi.server.reasoning.formats import ReasoningFormat

_UNESCAPED_SLASH = re.compile(r"(?<!\\)((?:\\\\)*)/")
_START_RULE = re.compile(r"^start(\s*):", re.MULTILINE)


def _answer_rule(grammar: Grammar) -> str:
    """`tgi_answer` and the rules it needs: the request's grammar as a Lark rule."""
    if grammar.kind == "json_schema":
        schema = json.loads(grammar.source)
        if isinstance(schema, dict) and "x-guidance" not in schema:
            schema = {**schema, "x-guidance": JSON_STYLE}  # as `Grammar.json_schema` compiles alone
        return f"tgi_answer: %json {json.dumps(schema)}\n"
    if grammar.kind == "regex":
        pattern = _UNESCAPED_SLASH.sub(r"\1\\/", grammar.source).replace("\n", "\\n")
        return f"tgi_answer: /{pattern}/\n"
    return _START_RULE.sub(r"tgi_answer\1:", grammar.source).rstrip("\n") + "\n"


def _tag(tag: str, is_token: bool) -> str:
    return tag if is_token else json.dumps(tag)


def after_reasoning(
    grammar: Grammar, fmt: ReasoningFormat, inside: bool, token_tags: frozenset[str] = frozenset()
) -> Grammar:
    """`grammar` applied to the answer only: free text, the end tag, optional whitespace, then `grammar`.
    `inside`: the prompt opened the reasoning (the output starts in it; a repeated start tag is allowed).
    Otherwise the output may open it with the start tag or answer at once, as `ReasoningSplitter` reads it.
    `token_tags`: the tags that are single tokens of the model's vocabulary."""
    start, end = fmt.start_tag in token_tags, fmt.end_tag in token_tags
    if end:
        think = f"TGI_THINK {_tag(fmt.end_tag, True)}"
        rules = "TGI_THINK: /(?s:.)*/\n"
    else:
        think = "tgi_think"
        escaped = re.escape(fmt.end_tag).replace("/", "\\/")
        rules = f"tgi_think[lazy]: /(?s:.)*{escaped}/\n"
    opening = _tag(fmt.start_tag, start)
    reasoned = f"TGI_WS {opening} {think} TGI_WS tgi_answer"
    if inside:
        head = f"start: tgi_open {think} TGI_WS tgi_answer\ntgi_open: TGI_WS {opening} | \n"
    else:
        head = f"start: tgi_answer | {reasoned}\n"
    if not start and inside:  # a text start tag is matched by the free text itself
        head = f"start: {think} TGI_WS tgi_answer\n"
    return Grammar.lark(head + rules + "TGI_WS: /[ \\t\\r\\n]*/\n" + _answer_rule(grammar))
