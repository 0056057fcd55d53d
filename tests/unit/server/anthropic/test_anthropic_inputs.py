"""An Anthropic request as chat-template messages, a tool plan and sampling parameters."""

from __future__ import annotations

import pytest

from tgi.server.anthropic.inputs import (
    check_thinking,
    prefill,
    prompt_messages,
    sampling_params,
    template_messages,
    tool_plan,
)
from tgi.server.anthropic.schemas import MessagesRequest
from tgi.server.http.errors import ApiError
from tgi.server.service.settings import ServerSettings

TOOL = {"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}


def request(**fields) -> MessagesRequest:
    return MessagesRequest.model_validate(
        {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}], **fields}
    )


def test_system_text_and_tool_blocks_as_chat_messages():
    req = request(
        system=[{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}],
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Paris, then.", "signature": ""},  # not shown
                    {"type": "text", "text": "Let me look."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": [{"type": "text", "text": "18C"}],
                    },
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": "down", "is_error": True},
                    {"type": "text", "text": "And "},
                    {"type": "text", "text": "tomorrow?"},
                ],
            },
        ],
    )
    assert template_messages(req) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "18C", "name": "get_weather"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "Error: down"},
        {"role": "user", "content": "And tomorrow?"},
    ]


IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}


def test_image_blocks_are_image_parts_among_the_text_named_by_their_source():
    url = {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}}
    req = request(
        messages=[
            {
                "role": "user",
                "content": [{"type": "text", "text": "Look "}, IMAGE, {"type": "text", "text": "and"}, url],
            },
        ]
    )
    assert template_messages(req) == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Look "},
                {
                    "type": "image",
                    "url": "data:image/png;base64,AAAA",
                    "field": "messages[0].content[1].source.data",
                },
                {"type": "text", "text": "and"},
                {
                    "type": "image",
                    "url": "https://x.test/a.png",
                    "field": "messages[0].content[3].source.url",
                },
            ],
        }
    ]


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": {}}]}
                ]
            },
            "messages[0].content[0].type",
        ),
        (
            {
                "messages": [
                    {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "a"}]},
                    {"role": "user", "content": "x"},
                ]
            },
            "messages[0].content[0].type",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]},
            "messages[0].content[0].tool_use_id",
        ),
        ({"system": [{"type": "tool_result", "tool_use_id": "a"}]}, "system[0].type"),
        ({"system": [IMAGE]}, "system[0].type"),
        (
            {"messages": [{"role": "assistant", "content": [IMAGE]}, {"role": "user", "content": "x"}]},
            "messages[0].content[0].type",
        ),
    ],
)
def test_bad_conversations_name_the_field(fields, param):
    with pytest.raises(ApiError) as refused:
        template_messages(request(**fields))
    assert refused.value.param == param


def test_tool_choices():
    assert tool_plan(request()) is None
    assert tool_plan(request(tools=[TOOL])).choice == "auto"
    assert tool_plan(request(tools=[TOOL], tool_choice={"type": "any"})).choice == "required"
    named = tool_plan(request(tools=[TOOL], tool_choice={"type": "tool", "name": "get_weather"}))
    assert named.choice == "named" and [f.name for f in named.functions] == ["get_weather"]
    assert not tool_plan(request(tools=[TOOL], tool_choice={"type": "none"})).may_call
    for choice, param in [
        ({"type": "tool"}, "tool_choice.name"),
        ({"type": "sometimes"}, "tool_choice.type"),
        ({"type": "tool", "name": "nope"}, "tool_choice"),
    ]:
        with pytest.raises(ApiError) as refused:
            tool_plan(request(tools=[TOOL], tool_choice=choice))
        assert refused.value.param == param
    for tool, param in [
        ({**TOOL, "name": "bad name"}, "tools[0].name"),
        ({**TOOL, "input_schema": {"type": "string"}}, "tools[0].input_schema"),
    ]:
        with pytest.raises(ApiError) as refused:
            tool_plan(request(tools=[tool]))
        assert refused.value.param == param


def test_tools_reach_a_template_that_knows_none():
    messages, kwargs, plan = prompt_messages(
        request(tools=[TOOL], system="Be brief."), "{{ messages }}", False
    )
    assert "tools" not in kwargs and plan.choice == "auto"
    assert messages[0]["role"] == "system" and messages[0]["content"].startswith("Be brief.\n\n")
    assert '"name": "get_weather"' in messages[0]["content"]


def test_sampling_params():
    settings = ServerSettings()
    params, field = sampling_params(request(temperature=0, stop_sequences=["##"], top_k=5), None, settings)
    assert field is None and params.is_greedy and params.max_new_tokens == 8
    assert params.stop == ("##",) and not params.include_stop_str_in_output and params.top_k == 5
    params, _ = sampling_params(request(temperature=0.5, top_p=0.9), None, settings)
    assert params.do_sample and (params.temperature, params.top_p) == (0.5, 0.9)
    params, field = sampling_params(request(tools=[TOOL]), tool_plan(request(tools=[TOOL])), settings)
    assert field == "tools" and params.grammar is not None
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    fmt = {"output_config": {"format": {"type": "json_schema", "schema": schema}}}
    params, field = sampling_params(request(**fmt), None, settings)
    assert field == "output_config.format" and params.grammar is not None
    for fields, param in [
        ({"max_tokens": 0}, "max_tokens"),
        ({"temperature": 1.5}, "temperature"),
        ({"stop_sequences": ["a"] * (settings.max_stop_sequences + 1)}, "stop_sequences"),
        ({"output_config": {"format": {"type": "regex"}}}, "output_config.format"),
        ({"tools": [TOOL], **fmt}, "output_config.format"),
    ]:
        req = request(**fields)
        with pytest.raises(ApiError) as refused:
            sampling_params(req, tool_plan(req), settings)
        assert refused.value.param == param
    with pytest.raises(ApiError) as refused:
        sampling_params(
            request(tools=[TOOL]),
            tool_plan(request(tools=[TOOL])),
            ServerSettings(disable_grammar_support=True),
        )
    assert refused.value.param == "tools"


def test_thinking_follows_the_reasoning_parser():
    for thinking, reasoning in [
        (None, True),
        (None, False),
        ({"type": "adaptive"}, True),
        ({"type": "disabled"}, False),
    ]:
        check_thinking(thinking, reasoning)
    for thinking, reasoning in [
        ({"type": "enabled", "budget_tokens": 1024}, True),  # a budget is not kept here
        ({"type": "disabled"}, True),  # the model's thinking is returned whenever it thinks
        ({"type": "enabled", "budget_tokens": 1024}, False),
        ({"type": "adaptive"}, False),  # no thinking is returned without a parser
    ]:
        with pytest.raises(ApiError) as refused:
            check_thinking(thinking, reasoning)
        assert refused.value.param == "thinking"


def test_a_final_assistant_turn_is_a_prefill_the_reply_continues():
    assert not prefill(request())
    req = request(messages=[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Well,"}])
    assert prefill(req)
    messages, kwargs, _ = prompt_messages(req, "{{ messages }}", False)
    assert messages[-1] == {"role": "assistant", "content": "Well,"}
    assert (kwargs["continue_final_message"], kwargs["add_generation_prompt"]) == (True, False)
    thinking = {"type": "thinking", "thinking": "x", "signature": ""}  # dropped, as earlier turns' are
    blocks = [thinking, {"type": "text", "text": "Well,"}]
    assert prefill(
        request(messages=[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": blocks}])
    )


@pytest.mark.parametrize(
    ("content", "param"),
    [
        ("Well, ", "messages[1].content"),  # as Anthropic refuses it
        ([{"type": "tool_use", "id": "t", "name": "f", "input": {}}], "messages[1].content[0]"),
    ],
)
def test_a_prefill_that_cannot_be_continued_is_refused_by_name(content, param):
    req = request(messages=[{"role": "user", "content": "Hi"}, {"role": "assistant", "content": content}])
    with pytest.raises(ApiError) as refused:
        prefill(req)
    assert refused.value.param == param


def test_vllms_template_variables_and_effort_reach_the_template():
    req = request(chat_template_kwargs={"enable_thinking": False}, output_config={"effort": "low"})
    _, kwargs, _ = prompt_messages(req, "{{ messages }}", False)
    assert (kwargs["enable_thinking"], kwargs["reasoning_effort"]) == (False, "low")
    with pytest.raises(ApiError) as refused:
        prompt_messages(request(output_config={"effort": "extreme"}), "{{ messages }}", False)
    assert refused.value.param == "output_config.effort"
