"""The sampler cases of the samplers vLLM and llama.cpp added (min-p, top-n-sigma, XTC, DRY, bad words,
allowed tokens) and of logits processors, framework-free like `tgi.core.testing.sampling_cases`: each case
names the `SamplingParams` fields it needs (`SamplerCase.needs`), so that a sampler which refuses one
(`RunnerCapabilities.unsupported_sampling`) skips it, and gives the plain-Python twins of the processors it
selects (`SamplerCase.processors`; a torch sampler finds the torch ones in
`tgi.core.torch.testing.logits_processors`, registered under the same names).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from tgi.core.interfaces.batch import ScheduledSequence
from tgi.core.sampling_params import LogitsProcessorChoice, SamplingParams
from tgi.core.testing.sampling_cases import SamplerCase, sampler_case

#: the testing processors' names (`tgi.core.torch.testing.logits_processors` registers the torch ones)
BAN_PROCESSOR = "tgi-testing-ban"  # args {"token_ids": [...]}: those tokens become -inf
BOOST_PROCESSOR = "tgi-testing-boost-last"  # args {"amount": x}: the last token of the history gains x


def plain_ban(values: list[float], row: ScheduledSequence, args: Mapping[str, Any]) -> list[float]:
    banned = set(args["token_ids"])
    return [-math.inf if t in banned else v for t, v in enumerate(values)]


def plain_boost_last(values: list[float], row: ScheduledSequence, args: Mapping[str, Any]) -> list[float]:
    out = list(values)
    out[row.all_token_ids[-1]] += float(args.get("amount", 5.0))
    return out


PLAIN_PROCESSORS = {BAN_PROCESSOR: plain_ban, BOOST_PROCESSOR: plain_boost_last}


def _seeded(params: list[SamplingParams], copies: int = 6) -> list[SamplingParams]:
    """Each params `copies` times with different seeds (a truncation's errors show in some draws only)."""
    return [
        replace(p, seed=(7 + 31 * i + 7919 * j) % 2**64) for j in range(copies) for i, p in enumerate(params)
    ]


def min_p_case() -> SamplerCase:
    """min-p alone, beside temperatures, top-k/top-p and typical-p; min_p=1 keeps the most likely token."""
    params = [
        SamplingParams(do_sample=True, min_p=0.05),
        SamplingParams(do_sample=True, min_p=0.3, temperature=1.5),
        SamplingParams(do_sample=True, min_p=1.0),
        SamplingParams(do_sample=True, min_p=0.1, top_k=5, top_p=0.9),
        SamplingParams(do_sample=True, min_p=0.02, temperature=0.6, typical_p=0.8),
    ]
    return replace(
        sampler_case([*_seeded(params), SamplingParams(min_p=0.5)], seed=11), needs=frozenset({"min_p"})
    )


def top_n_sigma_case() -> SamplerCase:
    params = [
        SamplingParams(do_sample=True, top_n_sigma=1.0),
        SamplingParams(do_sample=True, top_n_sigma=0.5, temperature=2.0),
        SamplingParams(do_sample=True, top_n_sigma=2.0, top_k=10),
        SamplingParams(do_sample=True, top_n_sigma=1.5, min_p=0.1, temperature=0.8),
    ]
    return replace(sampler_case(_seeded(params), seed=12), needs=frozenset({"top_n_sigma"}))


def xtc_case() -> SamplerCase:
    """XTC always on, on half the draws, with thresholds that catch several tokens or none."""
    params = [
        SamplingParams(do_sample=True, xtc_probability=1.0, xtc_threshold=0.05),
        SamplingParams(do_sample=True, xtc_probability=0.5, xtc_threshold=0.1),
        SamplingParams(do_sample=True, xtc_probability=1.0, xtc_threshold=0.1, temperature=0.5),
        SamplingParams(do_sample=True, xtc_probability=1.0, xtc_threshold=0.0, top_k=4),
        SamplingParams(do_sample=True, xtc_probability=1.0, xtc_threshold=0.3, temperature=5.0),
        SamplingParams(do_sample=True, xtc_probability=0.7, xtc_threshold=0.02, min_p=0.05, top_p=0.95),
    ]
    needs = frozenset({"xtc_probability", "xtc_threshold"})
    return replace(sampler_case(_seeded(params), seed=13), needs=needs)


def _with_history(case: SamplerCase, histories: list[tuple[list[int], int]]) -> SamplerCase:
    """`case` with row i's token history `histories[i]` = (all_token_ids, num_prompt_tokens)."""
    rows = [
        replace(r, all_token_ids=tokens, num_prompt_tokens=prompt, token_ids=[tokens[-1]])
        for r, (tokens, prompt) in zip(case.rows, histories, strict=True)
    ]
    return replace(case, rows=rows)


def dry_case() -> SamplerCase:
    """DRY over repeating histories: plain repeats, a periodic one, breakers alone and with a tail (before
    the repeat, and cutting it), a breaker that is itself the next token, a short window, the exponent's cap;
    greedy rows and sampled ones. Each row's most likely token is the one DRY would penalise without its
    breakers or window (a little above the others, less than the smallest penalty): it moves exactly where
    DRY applies."""
    dry = dict(dry_multiplier=0.8, dry_base=1.75, dry_allowed_length=2)
    big = dict(dry_multiplier=50.0, dry_base=1.75, dry_allowed_length=2)
    repeat = [10, 11, 12, 13, 10, 11, 12]
    rows = [  # (params, history, prompt length, the token a repeat would lead to)
        (SamplingParams(**big), repeat, 3, 13),
        (SamplingParams(**dry), [20, 21, 22] * 5 + [20, 21], 4, 22),
        (SamplingParams(**big, dry_sequence_breaker_ids=((11,),)), repeat, 3, 13),
        (SamplingParams(**big, dry_sequence_breaker_ids=((50,),)), [10, 11, 12, 13, 50, 10, 11, 12], 2, 13),
        (SamplingParams(**big, dry_sequence_breaker_ids=((11, 12),)), repeat, 3, 13),
        (SamplingParams(**big, dry_sequence_breaker_ids=((9,), (3, 4))), [1, 2, 9, 1, 2], 1, 9),
        (SamplingParams(**big, dry_penalty_last_n=4), [30, 31, 32, 33, 34, 30, 31, 32], 2, 33),
        (SamplingParams(dry_multiplier=1.0, dry_base=1e30, dry_allowed_length=1), [5, 6] * 8, 2, 5),
        (
            SamplingParams(**dict(dry, dry_allowed_length=3)),
            [40, 41, 42, 43, 40, 41, 42, 44, 40, 41, 42],
            5,
            44,
        ),
        (SamplingParams(do_sample=True, seed=3, **dry), [60, 61, 62, 63, 60, 61, 62], 3, 63),
        (SamplingParams(do_sample=True, seed=4, temperature=0.5, **big), [70, 71, 72, 70, 71], 2, 72),
        (SamplingParams(do_sample=True, seed=5, top_k=6, dry_multiplier=2.0), [80, 81, 80, 81, 80], 1, 81),
    ]
    case = sampler_case([p for p, *_ in rows], seed=14)
    logits = np.asarray(case.logits)
    for i, (p, _, _, target) in enumerate(rows):
        logits[i, target] = logits[i].max() + 0.4 * p.dry_multiplier
    case = replace(case, logits=logits.astype(np.float32).tolist())
    histories = [(tokens, prompt) for _, tokens, prompt, _ in rows]
    return replace(_with_history(case, histories), needs=frozenset({"dry_multiplier"}))


def bad_words_case() -> SamplerCase:
    """Each row's most likely token banned alone, or as the end of a word whose start was just generated
    (banned), or whose start was not (kept), or longer than the output (kept); greedy and sampled rows."""
    base = sampler_case([SamplingParams()] * 12, seed=15)
    best = np.asarray(base.logits).argmax(axis=1).tolist()
    params = []
    for i, b in enumerate(best):
        last = base.rows[i].all_token_ids[-1]  # the last token generated (every row generated one or two)
        words = [
            ((b,),),
            ((last, b), ((b + 1) % 128, 2)),
            ((last + 1, b),),
            ((1, 2, 3, 4, 5, 6, b),),
        ][i % 4]
        params.append(SamplingParams(do_sample=i >= 8, seed=i, top_k=3 if i >= 8 else 0, bad_words_ids=words))
    return replace(sampler_case(params, seed=15), needs=frozenset({"bad_words_ids"}))


def allowed_token_ids_case() -> SamplerCase:
    gen = np.random.default_rng(16)
    params = [
        SamplingParams(
            do_sample=i % 2 == 1,
            seed=i,
            allowed_token_ids=tuple(gen.choice(128, size=1 + (i * 7) % 20, replace=False).tolist()),
        )
        for i in range(12)
    ]
    return replace(sampler_case([*params, SamplingParams()], seed=16), needs=frozenset({"allowed_token_ids"}))


def logits_processors_case() -> SamplerCase:
    """Rows that select the testing processors (one, both in either order, with arguments), and rows
    that select none, greedy and sampled."""
    ban = LogitsProcessorChoice(BAN_PROCESSOR, {"token_ids": [0, 1, 2, 3, 5, 8, 13, 21, 34, 55, 89]})
    boost = LogitsProcessorChoice(BOOST_PROCESSOR, {"amount": 4.0})
    boost_more = LogitsProcessorChoice(BOOST_PROCESSOR, {"amount": 40.0})
    chosen = [(ban,), (boost,), (ban, boost), (boost_more, ban), (), (boost_more,)]
    params = [
        SamplingParams(do_sample=j % 2 == 1, seed=j, logits_processors=c) for j in range(2) for c in chosen
    ]
    case = sampler_case(params, seed=17)
    return replace(case, needs=frozenset({"logits_processors"}), processors=PLAIN_PROCESSORS)


#: name -> the case (`SamplerConformance` checks each one)
EXTENDED_SAMPLER_CASES = {
    "min_p": min_p_case,
    "top_n_sigma": top_n_sigma_case,
    "xtc": xtc_case,
    "dry": dry_case,
    "bad_words": bad_words_case,
    "allowed_token_ids": allowed_token_ids_case,
    "logits_processors": logits_processors_case,
}
