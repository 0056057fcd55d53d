"""The Messages API's fields: each one served, accepted as Anthropic defines it (no effect), or refused by
name with a 400."""

from __future__ import annotations

import pytest

from tgi.server.anthropic.schemas import CountTokensRequest, MessagesRequest
from tgi.server.http.errors import ApiError
from tgi.server.validation.fields import check_fields

BASE = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]}
IMAGE = {"type": "image", "source": {"type": "url", "url": "http://x/y.png"}}


def _image(**source) -> dict:
    """`fields` whose one message holds an image block of this `source`."""
    return {
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "image", "source": source}]}
        ]
    }


def checked(**fields) -> MessagesRequest:
    req = MessagesRequest.model_validate({**BASE, **fields})
    check_fields(req)
    return req


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        (_image(type="file", file_id="file_1"), "messages[0].content[1].source.type"),
        (_image(type="text", data="x"), "messages[0].content[1].source.type"),
        (_image(data="x"), "messages[0].content[1].source.type"),
        (
            _image(type="base64", media_type="image/tiff", data="AA=="),
            "messages[0].content[1].source.media_type",
        ),
        (_image(type="base64", data="AA=="), "messages[0].content[1].source.media_type"),
        (_image(type="base64", media_type="image/png"), "messages[0].content[1].source.data"),
        (
            _image(type="base64", media_type="image/png", data="AA==", url="http://x"),
            "messages[0].content[1].source.url",
        ),
        (_image(type="url"), "messages[0].content[1].source.url"),
        (
            _image(type="url", url="http://x/y.png", media_type="image/png"),
            "messages[0].content[1].source.media_type",
        ),
        (_image(type="url", url="http://x/y.png", file_id="f"), "messages[0].content[1].source.file_id"),
        ({"messages": [{"role": "user", "content": [{"type": "image"}]}]}, "messages[0].content[0].source"),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "Hi", "source": IMAGE["source"]}]}
                ]
            },
            "messages[0].content[0].source",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
            "messages[0].content[0].type",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "tool_result", "tool_use_id": "a", "content": [IMAGE]}],
                    }
                ]
            },
            "messages[0].content[0].content[0].type",
        ),
        (
            {"tools": [{"type": "web_search_20250305", "name": "web_search", "input_schema": {}}]},
            "tools[0].type",
        ),
        ({"mcp_servers": [{"type": "url", "url": "http://x"}]}, "mcp_servers"),
        ({"container": "c1"}, "container"),
        ({"service_tier": "priority"}, "service_tier"),
        ({"speed": "fast"}, "speed"),
        ({"tools": [{"name": "f", "input_schema": {}, "defer_loading": True}]}, "tools[0].defer_loading"),
    ],
)
def test_unserved_fields_are_refused_by_name(fields, param):
    with pytest.raises(ApiError) as refused:
        checked(**fields)
    assert refused.value.status == 422 and refused.value.param == param  # a 400 on Anthropic's routes
    assert f"`{param}`" in refused.value.message


def test_image_blocks_of_a_base64_or_url_source_are_served():
    checked(**_image(type="base64", media_type="image/webp", data="AA=="))  # the bytes are checked later
    checked(**_image(type="url", url="https://x.test/y.png", cache_control=None))


def test_fields_with_no_effect_are_accepted():
    checked(
        metadata={"user_id": "u1"},
        thinking={"type": "disabled"},  # served or refused by `anthropic_inputs.check_thinking`
        messages=[
            {"role": "user", "content": "Hi"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "hm", "signature": "s"},
                    {"type": "redacted_thinking", "data": "x"},
                    {"type": "text", "text": "Hello"},
                ],
            },
            {"role": "user", "content": "Bye"},
        ],
        service_tier="standard_only",
        cache_control={"type": "ephemeral"},
        system=[{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral", "ttl": "5m"}}],
        tools=[{"name": "f", "input_schema": {"type": "object"}, "type": "custom", "strict": True}],
        tool_choice={"type": "auto", "disable_parallel_tool_use": True},
        stream=False,
    )


def test_required_fields():
    with pytest.raises(ValueError, match="max_tokens"):
        MessagesRequest.model_validate({k: v for k, v in BASE.items() if k != "max_tokens"})
    with pytest.raises(ValueError, match="model"):
        MessagesRequest.model_validate({k: v for k, v in BASE.items() if k != "model"})
    with pytest.raises(ValueError, match="messages"):
        MessagesRequest.model_validate({**BASE, "messages": []})
    counted = CountTokensRequest.model_validate({k: v for k, v in BASE.items() if k != "max_tokens"})
    check_fields(counted)
