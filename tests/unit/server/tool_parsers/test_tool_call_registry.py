"""Which tool-call format a chat template teaches: `auto` finds it or none (the generic grammar stays),
a named parser the template does not teach is refused by name."""

from __future__ import annotations

import pytest

from tgi.server.tool_parsers import UnfitToolCallParserError, tool_call_format

# the parts of the real templates that tell the formats apart
QWEN25 = '{%- if tools %}...<tool_call>\\n{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call>'
LLAMA31 = (
    "<|start_header_id|>user<|end_header_id|>... Respond in the format "
    '{"name": function name, "parameters": dictionary of argument name and its value}.'
    "{%- if builtin_tools is defined %}<|python_tag|>{% endif %}"
)
MISTRAL = "{%- if message.tool_calls %}[TOOL_CALLS][{% for tool_call in message.tool_calls %}..."
PLAIN = "{% for m in messages %}<|im_start|>{{ m.role }}{% endfor %}"


@pytest.mark.parametrize(
    ("template", "name"), [(QWEN25, "hermes"), (LLAMA31, "llama3_json"), (MISTRAL, "mistral")]
)
def test_auto_picks_the_format_the_template_teaches(template, name):
    assert tool_call_format("auto", template).name == name
    assert tool_call_format(name, template).name == name


def test_no_format_without_one_in_the_template_or_without_the_flag():
    assert tool_call_format("auto", PLAIN) is None
    assert tool_call_format("auto", None) is None
    assert tool_call_format(None, QWEN25) is None


def test_a_named_parser_the_template_does_not_teach_is_refused_by_name():
    with pytest.raises(UnfitToolCallParserError, match=r"--tool-call-parser mistral.*'\[TOOL_CALLS\]'"):
        tool_call_format("mistral", QWEN25)
    with pytest.raises(UnfitToolCallParserError, match="unknown"):
        tool_call_format("pythonic", QWEN25)
