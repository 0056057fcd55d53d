"""Seeded prompt sets, generated here (no downloads), so that every run and every server sees the same text.

- `peers`: the workload behind the figures in /work/shared/PEERS.md: "Continue this text: " followed by
  20–300 words drawn with a fixed seed from a small vocabulary; every request asks for the same number of
  output tokens (128 by default).
- `sharegpt-like`: a mix of prompt and output lengths shaped like ShareGPT conversations (long-tailed,
  lognormal-ish: most prompts short, a few long; outputs likewise), from the same vocabulary.
- `copy`: a repetitive workload (editing, quoting, extraction: the output repeats long runs of the input,
  speculative decoding's n-gram case): a passage of 6–10 plain sentences, drawn in a seeded order, to be
  repeated word for word; the prompt ends with the passage's first words, so the answer is under way.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

PREFIX = "Continue this text: "

# A small, fixed vocabulary: common English words (order matters: it is part of the seeded workload).
_WORDS = (
    "the of and to in is was that for on with as by at from his her they we you it this be are were "
    "have had has not but or an which one all their there been when who will more no if out so what up "
    "about into than them can only other new some could time these two may then do first any my now "
    "such like our over man me even most made after also did many before must through back years where "
    "much your way well down should because each just those people how too little state good very make "
    "world still own see men work long get here between both life being under never day same another "
    "know while last might us great old year off come since against go came right used take three house "
    "water river city garden window morning evening light story music table letter road bridge forest "
    "mountain ocean village market winter summer friend teacher doctor machine engine signal paper"
)
VOCABULARY = tuple(_WORDS.split())


@dataclass(frozen=True)
class BenchPrompt:
    """One request of a workload: its text, how many tokens to ask for, and its length in words."""

    text: str
    max_tokens: int
    num_words: int


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(VOCABULARY) for _ in range(n))


def peers_prompts(
    n: int, seed: int = 0, max_tokens: int = 128, min_words: int = 20, max_words: int = 300
) -> list[BenchPrompt]:
    """PEERS.md's workload: `n` prompts of `min_words`..`max_words` words (uniform), `max_tokens` each."""
    if not 1 <= min_words <= max_words:
        raise ValueError(f"need 1 <= min_words <= max_words, got {min_words}, {max_words}")
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(min_words, max_words)
        out.append(BenchPrompt(PREFIX + _words(rng, k), max_tokens, k))
    return out


_SENTENCES = (
    "The river runs through the old city and under seven stone bridges.",
    "Every morning the market opens before the first light reaches the square.",
    "The teacher wrote the names of the planets on the board in large letters.",
    "A small boat waited at the end of the wooden pier for most of the summer.",
    "The engine of the train was painted green and carried the number forty two.",
    "In winter the village road is closed after the snow covers the mountain pass.",
    "The doctor walked to the house on the hill to see the family once a week.",
    "Music came from the open window of the house next to the bakery.",
    "The letter arrived three days late because the bridge had been washed away.",
    "Children played in the garden while their parents talked about the harvest.",
    "The machine counted the coins and printed a small paper receipt for each one.",
    "At night the lighthouse sends a signal that ships can see from far at sea.",
    "The forest behind the school is full of tall trees and narrow paths.",
    "Her friend kept every story she wrote in a box under the kitchen table.",
)


def copy_prompts(n: int, seed: int = 0, max_tokens: int = 128) -> list[BenchPrompt]:
    """The `copy` workload: `n` passages of 6–10 sentences, each to be repeated word for word."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        passage = " ".join(rng.sample(_SENTENCES, rng.randint(6, 10)))
        head = " ".join(passage.split()[:4])
        text = f"Repeat the following text word for word.\n\nText: {passage}\n\nRepeated text: {head}"
        out.append(BenchPrompt(text, max_tokens, len(text.split())))
    return out


def _lognormal_int(rng: random.Random, median: float, sigma: float, lo: int, hi: int) -> int:
    return int(min(hi, max(lo, round(rng.lognormvariate(math.log(median), sigma)))))


def sharegpt_like_prompts(
    n: int,
    seed: int = 0,
    max_tokens: int | None = None,
    prompt_median_words: float = 110,
    prompt_sigma: float = 1.0,
    output_median_tokens: float = 140,
    output_sigma: float = 0.8,
    max_prompt_words: int = 1000,
    max_output_tokens: int = 512,
) -> list[BenchPrompt]:
    """ShareGPT-shaped lengths: lognormal prompt words (median ~110, long tail capped at 1000) and output
    tokens (median ~140, capped at 512); `max_tokens` forces one output length for every request."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = _lognormal_int(rng, prompt_median_words, prompt_sigma, 4, max_prompt_words)
        m = _lognormal_int(rng, output_median_tokens, output_sigma, 4, max_output_tokens)
        out.append(BenchPrompt(PREFIX + _words(rng, k), max_tokens or m, k))
    return out


PROMPT_SETS = {"peers": peers_prompts, "sharegpt-like": sharegpt_like_prompts, "copy": copy_prompts}


def build_prompts(name: str, n: int, seed: int = 0, max_tokens: int | None = None) -> list[BenchPrompt]:
    """`n` prompts of the set `name` (see `PROMPT_SETS`); `max_tokens` None keeps the set's own lengths."""
    if name not in PROMPT_SETS:
        raise ValueError(f"unknown prompt set {name!r}: choose from {', '.join(PROMPT_SETS)}")
    if name == "peers":
        return peers_prompts(n, seed, max_tokens or 128)
    if name == "copy":
        return copy_prompts(n, seed, max_tokens or 128)
    return sharegpt_like_prompts(n, seed, max_tokens)


def main(argv: list[str] | None = None) -> int:
    """`python src/tgi/benchmarks/prompts.py [peers|sharegpt-like] [N] [--seed S]`: print a seeded prompt set as
    JSON lines."""
    import argparse
    import json

    p = argparse.ArgumentParser(description=main.__doc__)
    p.add_argument("set", nargs="?", default="peers", choices=sorted(PROMPT_SETS))
    p.add_argument("n", nargs="?", type=int, default=16)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-tokens", type=int, default=None)
    args = p.parse_args(argv)
    for prompt in build_prompts(args.set, args.n, args.seed, args.max_tokens):
        print(json.dumps({"prompt": prompt.text, "max_tokens": prompt.max_tokens, "words": prompt.num_words}))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
