"""vLLM's prompt and output details through the official `openai` client (`extra_body`) on the default model
(the shared server, started with --enable-prefill-logprobs), each checked by its effect: `prompt_logprobs`
gives one entry per prompt token (None first), each holding the prompt token and the k most likely tokens,
sorted, their ranks agreeing with their logprobs, the prompt token's logprob the one `echo` with `logprobs`
reports; `skip_special_tokens: false` shows the special tokens the model emits (a logit bias of 100 makes it
emit `<|im_start|>`, far from any tie) but not the EOS that ends the output, unless
`include_stop_str_in_output`; chat's `echo` answers the final assistant message followed by what the same
request answers without it (the continued count of test_templates_e2e.py, whose greedy tokens are far from a
tie)."""

from __future__ import annotations

import httpx
import pytest

pytestmark = pytest.mark.e2e

K = 3
IM_START, IM_END = 1, 2  # SmolLM2's <|im_start|> (no stop token) and <|im_end|> (its EOS)
PREFILL = "One, two, three,"
CONTINUE = [
    {"role": "user", "content": "Count from one to ten."},
    {"role": "assistant", "content": PREFILL},
]


@pytest.fixture(scope="module")
def openai_client(server):
    import openai

    return openai.OpenAI(base_url=server.url + "/v1", api_key="-", timeout=120, max_retries=0)


@pytest.fixture(scope="module")
def prompt_ids(server) -> list[int]:
    r = httpx.post(server.url + "/tokenize", json={"inputs": "The capital of France is Paris"}, timeout=60)
    assert r.status_code == 200, r.text
    return [t["id"] for t in r.json()]


def _check_prompt_logprobs(entries: list, ids: list[int]) -> None:
    assert len(entries) == len(ids) and entries[0] is None
    for token_id, entry in zip(ids[1:], entries[1:], strict=True):
        own = entry[str(token_id)]  # the prompt token is always there
        tops = sorted((e for e in entry.values() if e["rank"] <= K), key=lambda e: e["rank"])
        assert [e["rank"] for e in tops] == list(range(1, K + 1)), entry
        assert [e["logprob"] for e in tops] == sorted((e["logprob"] for e in tops), reverse=True)
        assert len(entry) in (K, K + 1) and all(
            set(e) == {"logprob", "rank", "decoded_token"} for e in entry.values()
        )
        # its rank agrees with the logprobs: the better-ranked tokens are at least as likely
        assert all(e["logprob"] >= own["logprob"] for e in tops if e["rank"] < own["rank"]), entry
        assert own["rank"] > K or tops[own["rank"] - 1]["logprob"] == own["logprob"], entry


def test_completion_prompt_logprobs_rank_every_prompt_token(openai_client, prompt_ids):
    r = openai_client.completions.create(
        model="tgi", prompt=prompt_ids, max_tokens=1, temperature=0, extra_body={"prompt_logprobs": K}
    )
    entries = r.choices[0].model_extra["prompt_logprobs"]
    _check_prompt_logprobs(entries, prompt_ids)
    assert r.usage.prompt_tokens == len(prompt_ids)
    echoed = (
        openai_client.completions.create(
            model="tgi", prompt=prompt_ids, max_tokens=1, temperature=0, echo=True, logprobs=0
        )
        .choices[0]
        .logprobs.token_logprobs[: len(prompt_ids)]
    )
    for token_id, entry, lp in zip(prompt_ids[1:], entries[1:], echoed[1:], strict=True):
        assert abs(entry[str(token_id)]["logprob"] - lp) < 1e-3


def test_chat_prompt_logprobs_are_the_responses(openai_client, server):
    messages = [{"role": "user", "content": "Name a colour."}]
    r = openai_client.chat.completions.create(
        model="tgi", messages=messages, max_tokens=1, temperature=0, extra_body={"prompt_logprobs": K}
    )
    entries = r.model_extra["prompt_logprobs"]
    rendered = httpx.post(
        server.url + "/chat_tokenize", json={"model": "tgi", "messages": messages}, timeout=60
    )
    assert rendered.status_code == 200, rendered.text
    ids = [t["id"] for t in rendered.json()["tokenize_response"]]
    assert len(entries) == r.usage.prompt_tokens == len(ids)
    _check_prompt_logprobs(entries, ids)


def _text(client, stream: bool = False, **extra) -> tuple[str, str]:
    kw = dict(model="tgi", prompt="Hello", max_tokens=3, temperature=0, extra_body=extra)
    if not stream:
        choice = client.completions.create(**kw).choices[0]
        return choice.text, choice.finish_reason
    chunks = [c.choices[0] for c in client.completions.create(stream=True, **kw) if c.choices]
    return "".join(c.text for c in chunks), chunks[-1].finish_reason


@pytest.mark.parametrize("stream", [False, True])
def test_skip_special_tokens_false_shows_the_special_tokens_emitted(openai_client, stream):
    bias = {"logit_bias": {str(IM_START): 100}}
    assert _text(openai_client, stream, **bias) == ("", "length")
    shown = _text(openai_client, stream, skip_special_tokens=False, **bias)
    assert shown == ("<|im_start|>" * 3, "length")
    joined = _text(
        openai_client, stream, skip_special_tokens=False, spaces_between_special_tokens=False, **bias
    )
    assert joined == shown  # this tokenizer's decoder puts no space between added tokens


def test_the_eos_that_ends_the_output_is_shown_only_when_asked(openai_client):
    eos = {"logit_bias": {str(IM_END): 100}, "skip_special_tokens": False}
    assert _text(openai_client, **eos) == ("", "stop")
    assert _text(openai_client, include_stop_str_in_output=True, **eos) == ("<|im_end|>", "stop")


def test_chat_echo_prepends_the_final_assistant_message(openai_client):
    kw = dict(model="tgi", messages=CONTINUE, max_tokens=6, temperature=0)
    extra = {"continue_final_message": True, "add_generation_prompt": False}
    plain = openai_client.chat.completions.create(**kw, extra_body=extra).choices[0].message.content
    assert plain.startswith(" four,"), plain
    echoed = openai_client.chat.completions.create(**kw, extra_body={**extra, "echo": True})
    assert echoed.choices[0].message.content == PREFILL + plain
    stream = openai_client.chat.completions.create(**kw, stream=True, extra_body={**extra, "echo": True})
    deltas = [c.choices[0].delta.content or "" for c in stream if c.choices]
    assert deltas[0] == PREFILL and "".join(deltas) == PREFILL + plain
