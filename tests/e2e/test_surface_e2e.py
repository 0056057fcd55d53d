"""The rest of TGI's and OpenAI's surface (issue 23) through the official clients against the shared real
server: `logit_bias`, `n` > 1, `stop` as a string or a list, `echo` (with prompt logprobs), `best_of` up to
`--max-best-of`, `decoder_input_details`, `/invocations`, `/chat_tokenize`, and fields refused by name or
ignored."""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.e2e

PROMPT = "The capital of France is"
N = 8
MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def openai_client(server):
    from openai import OpenAI

    return OpenAI(base_url=server.url + "/v1", api_key="unused", timeout=120, max_retries=0)


@pytest.fixture(scope="module")
def expected(reference):
    return reference(PROMPT, N)


@pytest.fixture(scope="module")
def chat_ids(reference):
    tok = reference.tokenizer
    text = tok.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    return text, tok.encode(text, add_special_tokens=False)


def test_logit_bias_forces_and_bans_tokens(openai_client, reference, expected, chat_ids):
    tok = reference.tokenizer
    forced = tok.encode(" Paris", add_special_tokens=False)[0]
    out = openai_client.completions.create(
        model="tgi", prompt=PROMPT, max_tokens=3, temperature=0, logit_bias={str(forced): 100}
    )
    assert out.choices[0].text == tok.decode([forced] * 3)
    chat = openai_client.chat.completions.create(
        model="tgi", messages=MESSAGES, max_tokens=3, logit_bias={str(forced): 100}, logprobs=True, seed=1
    )  # sampled, yet the bias leaves one choice
    assert [t.token for t in chat.choices[0].logprobs.content] == [tok.decode([forced])] * 3
    assert all(t.logprob > -1e-3 for t in chat.choices[0].logprobs.content)
    first = tok.encode(expected, add_special_tokens=False)[0]  # the greedy text's first token
    banned = openai_client.completions.create(
        model="tgi", prompt=PROMPT, max_tokens=N, temperature=0, logit_bias={str(first): -100}
    )
    assert banned.choices[0].text != expected
    with pytest.raises(Exception) as refused:
        openai_client.completions.create(model="tgi", prompt=PROMPT, max_tokens=2, logit_bias={"-1": 5})
    assert refused.value.status_code == 422 and "`logit_bias` token ids" in refused.value.message


def test_n_choices_on_chat(openai_client, reference, chat_ids):
    greedy = reference(chat_ids[1], N)
    out = openai_client.chat.completions.create(
        model="tgi", messages=MESSAGES, max_tokens=N, temperature=0, n=2
    )
    assert [c.index for c in out.choices] == [0, 1]
    assert [c.message.content for c in out.choices] == [greedy, greedy]
    sampled = openai_client.chat.completions.create(model="tgi", messages=MESSAGES, max_tokens=N, n=3, seed=7)
    again = openai_client.chat.completions.create(model="tgi", messages=MESSAGES, max_tokens=N, n=3, seed=7)
    assert [c.message.content for c in sampled.choices] == [c.message.content for c in again.choices]
    assert out.usage.prompt_tokens == len(chat_ids[1])


def test_stop_as_a_string_and_as_a_list(openai_client, reference, expected, chat_ids):
    word = expected.split()[1]
    at = expected.index(word)
    out = openai_client.completions.create(model="tgi", prompt=PROMPT, max_tokens=N, temperature=0, stop=word)
    assert out.choices[0].text == expected[:at] and out.choices[0].finish_reason == "stop"
    greedy_chat = reference(chat_ids[1], N)
    chat_word = greedy_chat.split()[1]
    chat = openai_client.chat.completions.create(
        model="tgi", messages=MESSAGES, max_tokens=N, temperature=0, stop=["never there", chat_word]
    )
    assert chat.choices[0].message.content == greedy_chat[: greedy_chat.index(chat_word)]


def test_echo_prepends_the_prompt_and_its_logprobs(openai_client, reference, expected):
    out = openai_client.completions.create(model="tgi", prompt=PROMPT, max_tokens=N, temperature=0, echo=True)
    assert out.choices[0].text == PROMPT + expected
    streamed = openai_client.completions.create(
        model="tgi", prompt=PROMPT, max_tokens=N, temperature=0, echo=True, stream=True
    )
    assert "".join(c.choices[0].text for c in streamed if c.choices) == PROMPT + expected
    detailed = openai_client.completions.create(
        model="tgi", prompt=PROMPT, max_tokens=N, temperature=0, echo=True, logprobs=1
    )
    lp = detailed.choices[0].logprobs
    prompt_len = len(reference.tokenizer.encode(PROMPT))
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.text_offset) == prompt_len + N
    assert lp.token_logprobs[0] is None and all(v <= 0 for v in lp.token_logprobs[1:])
    assert lp.text_offset[prompt_len] == len(PROMPT)


def test_best_of_on_generate(server, expected):
    from text_generation import Client
    from text_generation.errors import ValidationError

    client = Client(server.url, timeout=120)
    out = client.generate(PROMPT, max_new_tokens=N, best_of=2, do_sample=True)
    [other] = out.details.best_of_sequences
    chosen = sum(t.logprob for t in out.details.tokens)
    assert chosen >= sum(t.logprob for t in other.tokens)
    with pytest.raises(ValidationError, match="`best_of` must be > 0 and <= 2"):
        client.generate(PROMPT, max_new_tokens=N, best_of=3, do_sample=True)


def test_decoder_input_details(server, reference, expected):
    from text_generation import Client

    out = Client(server.url, timeout=120).generate(PROMPT, max_new_tokens=N, decoder_input_details=True)
    ids = reference.tokenizer.encode(PROMPT)
    assert [t.id for t in out.details.prefill] == ids and out.generated_text == expected
    assert out.details.prefill[0].logprob is None and all(t.logprob <= 0 for t in out.details.prefill[1:])


def test_invocations_dispatch_like_sagemaker(server, reference, expected, chat_ids):
    post = lambda body: httpx.post(server.url + "/invocations", json=body, timeout=120)  # noqa: E731
    generated = post({"inputs": PROMPT, "parameters": {"max_new_tokens": N}})
    assert generated.json() == [{"generated_text": expected}]
    chat = post({"messages": MESSAGES, "max_tokens": N, "temperature": 0}).json()
    assert chat["object"] == "chat.completion"
    assert chat["choices"][0]["message"]["content"] == reference(chat_ids[1], N)
    completion = post({"prompt": PROMPT, "max_tokens": N, "temperature": 0}).json()
    assert completion["choices"][0]["text"] == expected
    refused = post({"inputs": PROMPT, "parameters": {"adapter_id": "my-lora"}})
    assert refused.status_code == 422 and "`parameters.adapter_id`" in refused.json()["error"]


def test_chat_tokenize(server, chat_ids):
    body = httpx.post(server.url + "/chat_tokenize", json={"messages": MESSAGES}, timeout=120).json()
    text, ids = chat_ids
    assert body["templated_text"] == text
    assert [t["id"] for t in body["tokenize_response"]] == ids
    assert all(text[t["start"] : t["stop"]] == t["text"] for t in body["tokenize_response"])


def test_known_fields_are_refused_and_unknown_ones_ignored(openai_client):
    import openai

    with pytest.raises(openai.UnprocessableEntityError) as refused:
        openai_client.chat.completions.create(
            model="tgi",
            messages=MESSAGES,
            max_tokens=2,
            extra_body={"audio": {"voice": "alloy", "format": "wav"}},
        )
    assert refused.value.body["param"] == "audio" and "`audio`" in refused.value.message
    ok = openai_client.chat.completions.create(
        model="tgi", messages=MESSAGES, max_tokens=2, extra_body={"no_api_has_this": 1}
    )
    assert ok.choices[0].message.content is not None
