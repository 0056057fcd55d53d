"""vLLM's `bad_words` (a word's last token is out right after the rest of it was generated) and
`allowed_token_ids` (only those), through core's sampler, greedy and sampled."""

from __future__ import annotations

import gc

import torch

from tgi.core.interfaces.batch import ScheduledSequence
from tgi.core.sampling.bad_words import banned_tokens
from tgi.core.sampling.sampler import TorchSampler
from tgi.core.sampling_params import SamplingParams

V = 16


def row(params: SamplingParams, prompt=(1, 2), output=(), seed=0) -> ScheduledSequence:
    tokens = [*prompt, *output]
    return ScheduledSequence(
        "r", [tokens[-1]], len(tokens) - 1, [0], False, True, params, seed, len(prompt), tokens
    )


def favouring(*tokens: int) -> torch.Tensor:
    """Logits whose best tokens are `tokens`, in that order."""
    logits = torch.zeros(V)
    for rank, t in enumerate(tokens):
        logits[t] = 10.0 - rank
    return logits


def greedy(logits: torch.Tensor, *rows: ScheduledSequence) -> list[int]:
    return TorchSampler().sample(logits.expand(len(rows), -1).contiguous(), list(rows)).token_ids.tolist()


def test_a_one_token_bad_word_is_never_generated():
    params = SamplingParams(bad_words_ids=((5,),))
    assert greedy(favouring(5, 6), row(params)) == [6]
    sampled = SamplingParams(do_sample=True, temperature=5.0, bad_words_ids=((5,), (7,)))
    drawn = TorchSampler().sample(torch.zeros(400, V), [row(sampled, seed=s) for s in range(400)]).token_ids
    assert not ({5, 7} & set(drawn.tolist()))


def test_a_longer_bad_word_bans_its_last_token_only_right_after_the_rest():
    words = SamplingParams(bad_words_ids=((3, 4, 5),))
    assert greedy(favouring(5, 6), row(words, output=(3, 4))) == [6]  # "3 4" just generated
    assert greedy(favouring(5, 6), row(words, output=(4,))) == [5]  # only part of it
    assert greedy(favouring(5, 6), row(words, output=(3, 4, 9))) == [5]  # not the last tokens
    assert greedy(favouring(5, 6), row(words, prompt=(1, 3, 4))) == [5]  # the prompt never counts


def test_banned_tokens_matches_vllm_rules():
    words = ((9,), (3, 4, 5), (4, 8), (1, 2, 3, 4, 7))
    assert banned_tokens(words, []) == {9}
    assert banned_tokens(words, [3, 4]) == {9, 5, 8}
    assert banned_tokens(words, [2, 3, 4]) == {9, 5, 8}  # (1, 2, 3, 4, 7) needs "1 2 3 4" generated


def test_every_token_is_one_of_the_allowed_ids():
    allowed = (2, 11, 13)
    sampled = SamplingParams(do_sample=True, temperature=3.0, allowed_token_ids=allowed)
    logits = torch.randn(300, V, generator=torch.Generator().manual_seed(1))
    drawn = TorchSampler().sample(logits, [row(sampled, seed=s) for s in range(300)]).token_ids.tolist()
    assert set(drawn) == set(allowed)
    assert greedy(favouring(5, 13, 2), row(SamplingParams(allowed_token_ids=allowed))) == [13]


def test_rows_without_a_list_are_untouched_and_the_ids_go_to_the_device_once():
    sampler = TorchSampler()
    params = SamplingParams(allowed_token_ids=(3, 4))
    batch = favouring(7, 4).expand(2, -1).contiguous()
    for step in range(3):
        out = sampler.sample(batch, [row(params, output=(1,) * step), row(SamplingParams())]).token_ids
        assert out.tolist() == [4, 7]
    assert sampler.allowed.num_built == 1 and len(sampler.allowed) == 1
    del params
    gc.collect()
    assert len(sampler.allowed) == 0  # dropped with the request's parameters


def test_a_bad_word_that_is_the_only_allowed_token_left_gives_the_next_allowed():
    params = SamplingParams(allowed_token_ids=(5, 6), bad_words_ids=((5,),))
    assert greedy(favouring(5, 1, 6), row(params)) == [6]
