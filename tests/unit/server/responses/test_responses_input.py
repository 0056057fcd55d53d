"""A Responses request's conversation as chat messages, and its `tool_choice` in chat completions' shape."""

from __future__ import annotations

import pytest

from tgi.server.http.errors import ApiError
from tgi.server.responses.inputs import chat_tool_choice, conversation, template_options, with_instructions
from tgi.server.responses.schemas import InputItem, ResponsesRequest


def call(call_id: str) -> InputItem:
    return InputItem(type="function_call", call_id=call_id, name="f", arguments="{}")


def test_calls_join_the_assistant_message_before_them_and_outputs_answer_them():
    items = [
        InputItem(role="user", content="Hi"),
        InputItem(role="assistant", content="Let me look."),
        call("c1"),
        call("c2"),
        InputItem(type="function_call_output", call_id="c2", output="two"),
        InputItem(type="function_call_output", call_id="c1", output="one"),
    ]
    messages = conversation(items)
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool"]
    assert messages[1]["content"] == "Let me look." and [c["id"] for c in messages[1]["tool_calls"]] == [
        "c1",
        "c2",
    ]
    assert messages[2] == {"role": "tool", "tool_call_id": "c2", "content": "two"}


def test_an_output_answers_a_call_of_the_stored_history_and_leaves_it_unchanged():
    history = ({"role": "assistant", "content": "", "tool_calls": [{"id": "c0", "type": "function"}]},)
    messages = conversation(
        [call("c3"), InputItem(type="function_call_output", call_id="c0", output="x")], history
    )
    assert [c["id"] for c in messages[0]["tool_calls"]] == ["c0", "c3"]
    assert [c["id"] for c in history[0]["tool_calls"]] == ["c0"]


def test_developer_is_system_and_instructions_come_first():
    messages = conversation([InputItem(role="developer", content="Rules.")])
    assert with_instructions(messages, "Be brief.") == [
        {"role": "system", "content": "Be brief."},
        {"role": "system", "content": "Rules."},
    ]
    assert with_instructions(messages, None) == messages


def test_tool_choice_in_chat_shape():
    assert chat_tool_choice({"type": "function", "name": "f"}) == {
        "type": "function",
        "function": {"name": "f"},
    }
    assert [chat_tool_choice(c) for c in (None, "auto", "none", "required")] == [
        None,
        "auto",
        "none",
        "required",
    ]
    for bad in ({"type": "function"}, {"type": "mcp"}, "often", 3):
        with pytest.raises(ApiError) as info:
            chat_tool_choice(bad)
        assert info.value.status == 422 and info.value.param.startswith("tool_choice")


def test_a_reasoning_item_is_the_reasoning_of_the_assistant_text_and_calls_after_it():
    reasoning = InputItem(type="reasoning", content=[{"type": "reasoning_text", "text": "hm"}])
    items = [
        InputItem(role="user", content="Hi"),
        reasoning,
        InputItem(role="assistant", content="Yes."),
        call("c1"),
    ]
    messages = conversation(items)
    assert len(messages) == 2
    assert messages[1]["reasoning_content"] == "hm" and messages[1]["content"] == "Yes."
    assert [c["id"] for c in messages[1]["tool_calls"]] == ["c1"]


@pytest.mark.parametrize(
    ("status", "continued"),
    [("incomplete", True), ("in_progress", True), ("completed", False), (None, False)],
)
def test_a_last_assistant_message_left_partial_is_continued_as_vllm_does(status, continued):
    items = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Well,", "status": status}]
    options = template_options(ResponsesRequest.model_validate({"input": items}))
    assert (options.continue_final_message, options.add_generation_prompt) == (continued, not continued)


def test_reasoning_effort_is_the_templates_and_a_partial_reasoning_item_is_refused():
    options = template_options(
        ResponsesRequest.model_validate({"input": "Hi", "reasoning": {"effort": "low"}})
    )
    assert options.variables == {"reasoning_effort": "low", "enable_thinking": True}
    partial = {
        "type": "reasoning",
        "content": [{"type": "reasoning_text", "text": "x"}],
        "status": "incomplete",
    }
    with pytest.raises(ApiError) as refused:
        template_options(
            ResponsesRequest.model_validate({"input": [{"role": "user", "content": "Hi"}, partial]})
        )
    assert refused.value.param == "input[1].status"
    with pytest.raises(ApiError) as refused:
        template_options(ResponsesRequest.model_validate({"input": "Hi", "reasoning": {"effort": "much"}}))
    assert refused.value.param == "reasoning.effort"
