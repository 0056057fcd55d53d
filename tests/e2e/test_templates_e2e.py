"""The chat template's fields through the official clients on the default model (the shared server, which runs
with --trust-request-chat-template): a continued last message answers exactly what TGI's `/generate` answers
on the prompt transformers renders with `continue_final_message=True` (OpenAI's `continue_final_message`,
Anthropic's prefill, a partial assistant message given to Responses), a request's template shows the
variables it was given, and a server without the flag refuses the template by name, naming the flag.

The continued prompt's greedy tokens are far from a tie (their top two log-probabilities are 2.6 or more
apart in float32), so that the prefix cache warm from one request cannot tip another's answer."""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.e2e

N = 10
PREFILL = "One, two, three,"
ASK = [{"role": "user", "content": "Count from one to ten."}]
CONTINUE = [*ASK, {"role": "assistant", "content": PREFILL}]
#: a request's template that shows two of its variables, then the messages' text
SHOWS = "{{ greeting }} ({{ reasoning_effort }}): {% for m in messages %}{{ m.content }}{% endfor %}"


@pytest.fixture(scope="module")
def openai_client(server):
    import openai

    return openai.OpenAI(base_url=server.url + "/v1", api_key="-", timeout=120, max_retries=0)


@pytest.fixture(scope="module")
def continued(server, reference) -> tuple[str, int]:
    """What `/generate` answers (greedy, TGI's default) on the prompt transformers renders with
    `continue_final_message=True`, and that prompt's token count."""
    tok = reference.tokenizer
    prompt = tok.apply_chat_template(CONTINUE, continue_final_message=True, tokenize=False)
    assert prompt.endswith(f"<|im_start|>assistant\n{PREFILL}")  # left open: no <|im_end|> after it
    r = httpx.post(
        server.url + "/generate", json={"inputs": prompt, "parameters": {"max_new_tokens": N}}, timeout=120
    )
    assert r.status_code == 200, r.text
    text = r.json()["generated_text"]
    assert text == reference(prompt, N) and text.startswith(" four,")  # the count goes on
    return text, len(tok.encode(prompt, add_special_tokens=False))


def test_continue_final_message_answers_what_generate_answers(openai_client, continued):
    text, prompt_tokens = continued
    extra = {"continue_final_message": True, "add_generation_prompt": False}
    r = openai_client.chat.completions.create(
        model="tgi", messages=CONTINUE, max_tokens=N, temperature=0, extra_body=extra
    )
    assert r.choices[0].message.content == text and r.usage.prompt_tokens == prompt_tokens
    stream = openai_client.chat.completions.create(
        model="tgi", messages=CONTINUE, max_tokens=N, temperature=0, stream=True, extra_body=extra
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == text


def test_anthropic_prefill_answers_only_the_continuation(server, continued):
    import anthropic

    client = anthropic.Anthropic(base_url=server.url, api_key="-", timeout=120, max_retries=0)
    message = client.messages.create(
        model="tgi", max_tokens=N, messages=CONTINUE, extra_body={"temperature": 0}
    )
    [block] = message.content
    usage = message.usage  # Anthropic's input_tokens leave out those read from the (prefix) cache
    assert block.text == continued[0] and usage.input_tokens + usage.cache_read_input_tokens == continued[1]


def test_a_partial_assistant_message_is_continued_by_responses(openai_client, continued):
    partial = {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "incomplete",
        "content": [{"type": "output_text", "text": PREFILL, "annotations": []}],
    }
    r = openai_client.responses.create(
        model="tgi", input=[*ASK, partial], max_output_tokens=N, temperature=0, store=False
    )
    assert r.output_text == continued[0] and r.usage.input_tokens == continued[1]


def test_a_requests_template_shows_its_variables_and_reasoning_effort(server, openai_client, reference):
    body = {"chat_template": SHOWS, "chat_template_kwargs": {"greeting": "Bonjour"}}
    tokenized = httpx.post(
        server.url + "/chat_tokenize", json={"messages": ASK, "reasoning_effort": "low", **body}, timeout=120
    ).json()
    rendered = "Bonjour (low): Count from one to ten."
    assert tokenized["templated_text"] == rendered
    r = openai_client.chat.completions.create(
        model="tgi", messages=ASK, max_tokens=1, temperature=0, reasoning_effort="low", extra_body=body
    )
    assert r.usage.prompt_tokens == len(reference.tokenizer.encode(rendered, add_special_tokens=False))


def test_both_ends_of_the_prompt_at_once_are_refused(openai_client):
    import openai

    extra = {"continue_final_message": True, "add_generation_prompt": True}
    with pytest.raises(openai.UnprocessableEntityError) as refused:
        openai_client.chat.completions.create(model="tgi", messages=CONTINUE, max_tokens=1, extra_body=extra)
    assert refused.value.body["param"] == "continue_final_message"


@pytest.mark.parametrize(
    ("field", "value"), [("chat_template", SHOWS), ("documents", [{"title": "T", "text": "x"}])]
)
def test_without_the_flag_a_requests_template_is_refused_naming_it(reasoning_server, field, value):
    import openai

    client = openai.OpenAI(base_url=reasoning_server.url + "/v1", api_key="-", timeout=120, max_retries=0)
    with pytest.raises(openai.UnprocessableEntityError) as refused:
        client.chat.completions.create(model="tgi", messages=ASK, max_tokens=1, extra_body={field: value})
    assert refused.value.body["param"] == field
    assert "--trust-request-chat-template" in refused.value.body["message"]
