"""How a request asks its chat template to be applied (`tgi.server.chat.template`): vLLM's fields merged into
the renderer's arguments, each refusal naming its field, and what the flag opens."""

from __future__ import annotations

import pytest

from tgi.server.chat.template import TRUST_FLAG, TemplateOptions, template_options
from tgi.server.http.errors import ApiError


def refused(**fields) -> ApiError:
    with pytest.raises(ApiError) as info:
        template_options(False, **fields)
    assert info.value.status == 422
    return info.value


def test_by_default_the_models_template_closed_by_the_generation_prompt():
    assert template_options(False) == TemplateOptions()
    assert TemplateOptions().kwargs() == {"add_generation_prompt": True, "continue_final_message": False}


def test_variables_reach_the_renderer_beside_the_servers_own():
    options = template_options(False, variables={"enable_thinking": False, "bos_token": "<s>"})
    assert options.kwargs() == {
        "enable_thinking": False,
        "bos_token": "<s>",
        "add_generation_prompt": True,
        "continue_final_message": False,
    }


def test_continue_final_message_alone_leaves_the_generation_prompt_out():
    options = template_options(False, continue_final_message=True)
    assert (options.add_generation_prompt, options.continue_final_message) == (False, True)
    closed = template_options(False, add_generation_prompt=False)
    assert (closed.add_generation_prompt, closed.continue_final_message) == (False, False)


def test_continue_final_message_with_add_generation_prompt_is_refused():
    error = refused(continue_final_message=True, add_generation_prompt=True)
    assert error.param == "continue_final_message" and "Cannot set both" in error.message


def test_a_variable_stands_in_for_its_field_and_may_not_contradict_it():
    options = template_options(False, variables={"continue_final_message": True})
    assert (options.add_generation_prompt, options.continue_final_message) == (False, True)
    assert options.variables == {}  # given to the renderer as the field, not twice
    same = template_options(False, variables={"add_generation_prompt": False}, add_generation_prompt=False)
    assert same.add_generation_prompt is False
    error = refused(variables={"add_generation_prompt": True}, add_generation_prompt=False)
    assert error.param == "chat_template_kwargs.add_generation_prompt"


@pytest.mark.parametrize(
    ("effort", "thinking"), [("none", False), ("minimal", True), ("high", True), ("max", True)]
)
def test_reasoning_effort_is_a_variable_and_sets_enable_thinking_as_vllm(effort, thinking):
    options = template_options(False, reasoning_effort=effort)
    assert options.variables == {"reasoning_effort": effort, "enable_thinking": thinking}
    kept = template_options(False, reasoning_effort="low", variables={"enable_thinking": False})
    assert kept.variables == {"reasoning_effort": "low", "enable_thinking": False}  # the request's wins


def test_an_unknown_effort_names_its_field():
    assert refused(reasoning_effort="extreme").param == "reasoning_effort"
    error = refused(reasoning_effort="extreme", effort_field="output_config.effort")
    assert error.param == "output_config.effort" and "`output_config.effort` must be one of" in error.message


@pytest.mark.parametrize("name", ["messages", "tools", "tokenize", "return_dict", "chat_template"])
def test_the_renderers_own_arguments_are_no_variables(name):
    error = refused(variables={name: "x"}, variables_field="chat_template_kwargs")
    assert error.param == f"chat_template_kwargs.{name}"


@pytest.mark.parametrize(
    "fields",
    [
        {"chat_template": "{{ messages }}"},
        {"documents": [{"title": "a", "text": "b"}]},
        {"variables": {"documents": [{"title": "a", "text": "b"}]}},
    ],
)
def test_a_requests_template_and_documents_need_the_operators_flag(fields):
    error = refused(**fields)
    assert error.param in ("chat_template", "documents") and TRUST_FLAG in error.message
    options = template_options(True, **fields)
    assert options.chat_template == fields.get("chat_template")
    assert (options.documents is None) == ("chat_template" in fields)
