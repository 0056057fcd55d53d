"""vLLM's and llama.cpp's sampling fields through the official `openai` client (`extra_body`) against a real
server on the default model, each checked by its effect: min-p 1 at temperature 1 takes only the likeliest tokens; a bad word
greedy would say is not said; every token is one of `allowed_token_ids`; XTC at threshold 0 over the two
best tokens always takes the second; greedy with a large DRY penalty never extends a repeat of two tokens;
and a logits-processor plugin installed from a test package, enabled at launch, used by name; beam search
of one beam is greedy, of three gives three answers."""

from __future__ import annotations

import os
import textwrap

import pytest

pytestmark = pytest.mark.e2e

COUNTING = "1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1,"


@pytest.fixture(scope="module")
def openai_client(server):
    import openai

    return openai.OpenAI(base_url=server.url + "/v1", api_key="-", timeout=120, max_retries=0)


def _completion(client, prompt, max_tokens=12, **kw):
    return client.completions.create(model="tgi", prompt=prompt, max_tokens=max_tokens, **kw).choices[0]


def _ids(choice) -> list[int]:
    """The choice's token ids (`return_tokens_as_token_ids` names tokens `token_id:<id>`)."""
    return [int(t.split(":", 1)[1]) for t in choice.logprobs.tokens]


def test_min_p_one_at_temperature_one_takes_only_the_likeliest(openai_client):
    """Min-p 1 keeps only the tokens as likely as the likeliest: at temperature 1, whatever the seed, each
    token taken has its step's highest log-probability (greedy's token, or one tied with it exactly: two
    bfloat16 logits can be equal, and min-p keeps both, so the texts are not compared with greedy's)."""
    body = {"min_p": 1.0, "return_tokens_as_token_ids": True}
    for seed in (1, 2, 3):
        out = _completion(
            openai_client,
            "The three primary colours are",
            temperature=1.0,
            seed=seed,
            logprobs=2,
            extra_body=body,
        )
        for chosen, top in zip(out.logprobs.tokens, out.logprobs.top_logprobs, strict=True):
            assert top.get(chosen) == max(top.values()), (seed, chosen, top)


def test_a_bad_word_greedy_would_say_is_not_said(openai_client):
    prompt = "The capital of France is"
    greedy = _completion(openai_client, prompt, temperature=0).text
    assert "Paris" in greedy, greedy
    banned = _completion(openai_client, prompt, temperature=0, extra_body={"bad_words": ["Paris"]}).text
    assert "Paris" not in banned, banned


def test_every_token_is_one_of_the_allowed_ids(openai_client):
    greedy = _completion(openai_client, "Name some animals:", temperature=0, logprobs=1,
                         extra_body={"return_tokens_as_token_ids": True})  # fmt: skip
    allowed = sorted(set(_ids(greedy)))[:5]
    out = _completion(openai_client, "Name some animals:", temperature=1.5, seed=4, logprobs=1,
                      extra_body={"allowed_token_ids": allowed, "return_tokens_as_token_ids": True})  # fmt: skip
    assert _ids(out) and set(_ids(out)) <= set(allowed), (allowed, _ids(out))


def test_xtc_at_threshold_zero_over_the_two_best_always_takes_the_second(openai_client):
    body = {"top_k": 2, "xtc_probability": 1.0, "xtc_threshold": 0.0, "return_tokens_as_token_ids": True}
    out = _completion(openai_client, COUNTING, temperature=1.0, seed=5, logprobs=2, extra_body=body)
    for chosen, top in zip(out.logprobs.tokens, out.logprobs.top_logprobs, strict=True):
        ranked = sorted(top, key=top.get, reverse=True)  # the alternatives before truncation, best first
        assert chosen == ranked[1], (chosen, top)


def test_greedy_with_a_large_dry_penalty_never_extends_a_repeat(openai_client):
    prompt = openai_client.completions.create(
        model="tgi", prompt=COUNTING, max_tokens=1, temperature=0, echo=True, logprobs=1,
        extra_body={"return_tokens_as_token_ids": True},
    ).choices[0]  # fmt: skip
    prompt_ids = _ids(prompt)[:-1]  # the echoed prompt's tokens, then the one generated
    plain = _ids(_completion(openai_client, prompt_ids, temperature=0, logprobs=1,
                             extra_body={"return_tokens_as_token_ids": True}))  # fmt: skip
    dry = {"dry_multiplier": 1000.0, "dry_allowed_length": 2, "dry_sequence_breakers": [],
           "return_tokens_as_token_ids": True}  # fmt: skip
    penalised = _ids(_completion(openai_client, prompt_ids, temperature=0, logprobs=1, extra_body=dry))

    def extends_a_repeat(history: list[int], token: int) -> bool:
        """`history[-2:] + [token]` already stands in `history` (llama.cpp's definition, allowed length 2)."""
        tail = [*history[-2:], token]
        return any(history[j : j + 3] == tail for j in range(len(history) - 2))

    assert any(extends_a_repeat(prompt_ids + plain[:k], t) for k, t in enumerate(plain))  # greedy repeats
    assert not any(extends_a_repeat(prompt_ids + penalised[:k], t) for k, t in enumerate(penalised))


PLUGIN = '''
from tgi.core.sampling.logits_processor import LogitsProcessor


class BanTokens(LogitsProcessor):
    """Bans the token ids of `args["token_ids"]`."""

    def validate_args(self, args):
        ids = args.get("token_ids")
        if set(args) != {"token_ids"} or not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
            raise ValueError("takes `token_ids`, a list of token ids")

    def apply(self, logits, rows):
        for i, row in enumerate(rows):
            logits[i, row.args["token_ids"]] = float("-inf")
        return logits
'''


@pytest.fixture(scope="module")
def plugin_server(tmp_path_factory, launch_server, stop_server):
    """A server that enables `e2e_ban_tokens`, a processor of a distribution installed in a folder put on the
    server's PYTHONPATH (its dist-info names the entry point, as pip leaves it)."""
    root = tmp_path_factory.mktemp("processor-plugin")
    site = root / "site"
    (site / "tgi_e2e_processors-0.1.dist-info").mkdir(parents=True)
    (site / "tgi_e2e_processors.py").write_text(textwrap.dedent(PLUGIN))
    info = site / "tgi_e2e_processors-0.1.dist-info"
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tgi-e2e-processors\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[tgi.logits_processors]\ne2e_ban_tokens = tgi_e2e_processors:BanTokens\n"
    )
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
    s = launch_server(root, "--logits-processors", "e2e_ban_tokens", env={"PYTHONPATH": path})
    yield s
    assert stop_server(s) == 0, s.logs()


def test_a_logits_processor_plugin_is_used_by_name(plugin_server):
    import openai

    client = openai.OpenAI(base_url=plugin_server.url + "/v1", api_key="-", timeout=120, max_retries=0)
    as_ids = {"return_tokens_as_token_ids": True}
    greedy = _ids(
        _completion(client, "The capital of France is", temperature=0, logprobs=1, extra_body=as_ids)
    )
    chosen = {"logits_processors": [{"name": "e2e_ban_tokens", "args": {"token_ids": greedy[:1]}}], **as_ids}
    banned = _ids(
        _completion(client, "The capital of France is", temperature=0, logprobs=1, extra_body=chosen)
    )
    assert banned[0] != greedy[0] and greedy[0] not in banned
    with pytest.raises(openai.UnprocessableEntityError, match="not enabled on this server"):
        _completion(client, "x", extra_body={"logits_processors": ["other"]})
    with pytest.raises(openai.UnprocessableEntityError, match="takes `token_ids`"):
        _completion(client, "x", extra_body={"logits_processors": [{"name": "e2e_ban_tokens", "args": {}}]})


def test_beam_search_of_one_beam_is_greedy_and_of_three_gives_three_answers(openai_client):
    """vLLM's `use_beam_search`: one beam that never ends keeps the likeliest token each step (greedy, in
    float32); three beams come back as three different answers."""
    prompt = "The three primary colours are"
    greedy = _completion(openai_client, prompt, max_tokens=6, temperature=0, extra_body={"ignore_eos": True})
    beam = _completion(openai_client, prompt, max_tokens=6, temperature=0,
                       extra_body={"use_beam_search": True, "ignore_eos": True})  # fmt: skip
    assert beam.text == greedy.text
    out = openai_client.completions.create(
        model="tgi", prompt=prompt, max_tokens=6, n=3, temperature=0, extra_body={"use_beam_search": True}
    )
    texts = [c.text for c in out.choices]
    assert len(set(texts)) == 3 and [c.index for c in out.choices] == [0, 1, 2], texts
