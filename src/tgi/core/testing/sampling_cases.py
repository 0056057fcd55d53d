"""The cases every sampler is compared on with the reference sampler, whatever its framework.

A case is a batch of rows (`ScheduledSequence`s with their parameters, seeds and token histories) and
float32-representable logits as plain lists; a torch sampler gets `torch.tensor(case.logits)`, a JAX one
`jnp.asarray(case.logits)`, and both must give `reference_sample(case.logits, case.rows)`'s tokens and
logprobs (see `tgi.core.interfaces.sampling` for what they mean).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tgi.core.interfaces.batch import ScheduledSequence, TokenMasks
from tgi.core.sampling_params import SamplingParams
from tgi.core.watermark import Watermark

#: logprobs may differ from the reference's float64 values by this much (float32 arithmetic)
LOGPROB_TOLERANCE = 1e-4


@dataclass(frozen=True)
class SamplerCase:
    """One batch for a sampler: `logits` [len(rows)][vocab] and the rows they belong to."""

    rows: list[ScheduledSequence]
    logits: list[list[float]]
    token_masks: TokenMasks | None = None  # grammar masks of some rows (guided decoding)
    # the `SamplingParams` fields the case needs: a sampler that refuses one of them skips it
    needs: frozenset[str] = frozenset()
    # the plain-Python twins of the logits processors its rows select, by name
    # (`tgi.core.testing.reference_sampler.PlainProcessor`)
    processors: Mapping[str, Callable[..., Any]] | None = None


def greedy_params() -> list[SamplingParams]:
    """Greedy rows with every penalty, and with a logit bias (one that forces a token, one beside a
    penalty)."""
    return [
        SamplingParams(),
        SamplingParams(repetition_penalty=1.3),
        SamplingParams(frequency_penalty=0.5),
        SamplingParams(repetition_penalty=0.7, presence_penalty=-1.5),
        SamplingParams(logit_bias=((3, 100.0), (40, -2.5))),
        SamplingParams(logit_bias=((5, 4.0), (9, 1.5), (77, -100.0)), repetition_penalty=1.3),
    ]


def seeded_params() -> list[SamplingParams]:
    """Sampled rows with every processor (a logit bias included), each with 6 seeds, beside two greedy rows (truncation errors show
    in some draws only)."""
    params = [
        SamplingParams(do_sample=True, seed=7),
        SamplingParams(do_sample=True, temperature=0.7, top_k=20, seed=8),
        SamplingParams(do_sample=True, top_k=3, seed=12),
        SamplingParams(do_sample=True, top_p=0.8, typical_p=0.9, seed=9),
        SamplingParams(do_sample=True, temperature=2.0, top_p=0.4, seed=13),
        SamplingParams(do_sample=True, temperature=2.0, typical_p=0.3, seed=14),
        SamplingParams(do_sample=True, temperature=1.3, presence_penalty=0.4, seed=10),
        SamplingParams(do_sample=True, top_k=5, top_p=0.9, repetition_penalty=1.2, seed=2**64 - 1),
        SamplingParams(do_sample=True, temperature=0.5, typical_p=0.5, frequency_penalty=-0.7, seed=11),
        SamplingParams(do_sample=True, top_k=8, logit_bias=((2, 3.0), (60, 6.0), (100, -100.0)), seed=15),
    ]
    rows = [replace(p, seed=(p.seed + 7919 * j) % 2**64) for j in range(6) for p in params]
    return [*rows, SamplingParams(), SamplingParams(repetition_penalty=1.3)]


def sampler_case(params_list: list[SamplingParams], vocab_size: int = 128, seed: int = 3) -> SamplerCase:
    """Random logits (standard normal x 3, rounded to float32) over `vocab_size` tokens, one row per
    params; each row has a few tokens of history (1 or 2 of them generated) and the params' seed, else
    1000 + its index."""
    gen = np.random.default_rng(seed)
    logits = (gen.standard_normal((len(params_list), vocab_size)) * 3).astype(np.float32)
    rows = [
        ScheduledSequence(
            request_id=f"r{i}",
            token_ids=[9],
            start_pos=4 + i,
            block_table=[0],
            is_prefill=False,
            sample=True,
            sampling=p,
            seed=1000 + i if p.seed is None else p.seed,
            num_prompt_tokens=3,
            all_token_ids=[5, 9, 9, 7, 1 + i][: 4 + i % 2],
        )
        for i, p in enumerate(params_list)
    ]
    return SamplerCase(rows, logits.tolist())


def pack_token_masks(rows: tuple[int, ...], allowed: list[set[int]], vocab_size: int) -> TokenMasks:
    """`TokenMasks` for `rows` that allow the token ids in `allowed` (one set per row)."""
    words = -(-vocab_size // 32)
    bits = np.zeros((len(rows), words * 32), dtype=np.uint64)
    for j, tokens in enumerate(allowed):
        bits[j, sorted(tokens)] = 1
    weights = np.uint64(1) << np.arange(32, dtype=np.uint64)
    packed = (bits.reshape(len(rows), words, 32) * weights).sum(axis=2).astype(np.uint32).view(np.int32)
    return TokenMasks(rows=tuple(rows), bitmask=packed, vocab_size=vocab_size)


def masked_case(vocab_size: int = 128, seed: int = 5) -> SamplerCase:
    """Greedy and sampled rows, every other one under a grammar mask that allows a few random tokens (one
    row: a single token, as a grammar that must close), for samplers with `supports_token_masks`."""
    params = [*greedy_params(), *seeded_params()[::3]]
    case = sampler_case(params, vocab_size, seed)
    gen = np.random.default_rng(seed)
    rows = tuple(range(0, len(params), 2))
    allowed = [
        set(gen.choice(vocab_size, size=1 if j == 0 else 1 + j % 9, replace=False).tolist())
        for j in range(len(rows))
    ]
    return replace(case, token_masks=pack_token_masks(rows, allowed, vocab_size))


def watermarked_case(vocab_size: int = 128, seed: int = 7) -> SamplerCase:
    """Greedy and sampled rows under watermarks of several gammas and deltas (one delta large enough to
    move the greedy token, one beside a penalty and a logit bias), beside rows without one."""
    marks = [Watermark(), Watermark(0.25, 6.0), Watermark(0.75, 0.5)]
    params = [
        replace(p, watermark=marks[i % 3]) if i % 4 else p
        for i, p in enumerate([*greedy_params(), *seeded_params()[::2]])
    ]
    return sampler_case(params, vocab_size, seed)


#: name -> the case, for parametrised tests
SAMPLER_CASES = {
    "greedy": lambda: sampler_case(greedy_params() * 4),
    "seeded": lambda: sampler_case(seeded_params()),
    "masked": masked_case,
    "watermarked": watermarked_case,
}
