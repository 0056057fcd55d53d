"""Which reasoning parser a chat template has: `auto` finds one or none, a named one the template cannot
have is refused by name."""

from __future__ import annotations

import pytest

from tgi.server.reasoning import REASONING_FORMATS, UnfitReasoningParserError, reasoning_format
from tgi.server.reasoning.formats import ReasoningFormat

QWEN3_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content.split('</think>')[-1] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)
R1_TEMPLATE = "{% for m in messages %}<｜User｜>{{ m.content }}{% endfor %}<｜Assistant｜><think>\n"
PLAIN_TEMPLATE = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}"


def test_auto_picks_the_family_from_the_template_or_nothing():
    assert reasoning_format("auto", QWEN3_TEMPLATE) is REASONING_FORMATS["qwen3"]
    assert reasoning_format("auto", R1_TEMPLATE) is REASONING_FORMATS["deepseek_r1"]
    assert reasoning_format("auto", {"default": PLAIN_TEMPLATE, "tool_use": QWEN3_TEMPLATE}).name == "qwen3"
    assert reasoning_format("auto", PLAIN_TEMPLATE) is None
    assert reasoning_format("auto", None) is None
    assert reasoning_format(None, QWEN3_TEMPLATE) is None


def test_a_named_parser_the_template_cannot_have_is_refused_by_name():
    assert reasoning_format("qwen3", QWEN3_TEMPLATE).name == "qwen3"
    with pytest.raises(
        UnfitReasoningParserError, match=r"--reasoning-parser deepseek_r1.*'<think>' or '</think>'"
    ):
        reasoning_format("deepseek_r1", PLAIN_TEMPLATE)
    with pytest.raises(UnfitReasoningParserError, match="unknown"):
        reasoning_format("granite", QWEN3_TEMPLATE)


def test_where_the_reasoning_starts():
    qwen3, r1 = REASONING_FORMATS["qwen3"], REASONING_FORMATS["deepseek_r1"]
    assert r1.opens_in("<｜Assistant｜>")  # R1 reasons from the start, opened or not
    assert qwen3.opens_in("<|im_start|>assistant\n<think>\n")
    assert not qwen3.opens_in("<|im_start|>assistant\n")
    assert qwen3.splitter("<|im_start|>assistant\n<think>\n").split("a</think>b").reasoning == "a"
    assert ReasoningFormat("x", "[T]", "[/T]").fits("... [/T] ...")
