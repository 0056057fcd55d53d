"""Perplexity of a token sequence on our engine, computed exactly as llama.cpp's `llama-perplexity` computes
it (its default mode, `perplexity()` in `tools/perplexity/perplexity.cpp`, no `--ppl-stride`):

- the text is tokenized once, with a BOS token in front when the vocabulary adds one;
- it is cut into `n_chunk = len(tokens) // n_ctx` disjoint windows of `n_ctx` tokens (the tail is dropped;
  fewer than `2 * n_ctx` tokens is an error); each window runs from an empty KV cache;
- when the vocabulary adds BOS, the first token of every window is replaced by BOS;
- in each window only the second half is scored: with `first = n_ctx // 2`, the tokens at positions
  `first + 1 .. n_ctx - 1` (`n_ctx - 1 - first` of them), each by the log-probability the logits of the
  position before it give it;
- perplexity = exp(the mean negative log-likelihood over all scored tokens of all windows).

Ours takes the log-probabilities from the engine's prompt logprobs (`SamplingParams(prompt_logprobs=True)`,
TGI's `decoder_input_details`): one request per window, prefilled without any HTTP.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Window:
    """One window of `n_ctx` tokens as the model sees it, and which of its positions are scored."""

    token_ids: list[int]  # BOS first where the vocabulary adds one
    first_scored: int  # positions first_scored .. len(token_ids) - 1 are scored


@dataclass(frozen=True)
class PerplexityResult:
    """Perplexity over `num_scored` tokens of `num_windows` windows of `n_ctx` tokens."""

    perplexity: float
    mean_nll: float
    num_scored: int
    num_windows: int
    n_ctx: int


def windows(token_ids: Sequence[int], n_ctx: int, bos_id: int | None) -> list[Window]:
    """`llama-perplexity`'s windows of `token_ids` (already carrying BOS in front where the vocabulary adds
    one, as llama.cpp's tokenizer call does); `bos_id` None: the vocabulary adds no BOS."""
    if n_ctx < 4:
        raise ValueError(f"n_ctx must be at least 4, got {n_ctx}")
    if len(token_ids) < 2 * n_ctx:
        raise ValueError(
            f"the text has {len(token_ids)} tokens: at least {2 * n_ctx} are needed for a context of {n_ctx}"
        )
    out = []
    for i in range(len(token_ids) // n_ctx):
        chunk = list(token_ids[i * n_ctx : (i + 1) * n_ctx])
        if bos_id is not None:
            chunk[0] = bos_id
        out.append(Window(chunk, n_ctx // 2 + 1))
    return out


def from_logprobs(per_window: Sequence[Sequence[float]], n_ctx: int) -> PerplexityResult:
    """Perplexity from the log-probabilities of each window's scored tokens."""
    scored = [lp for w in per_window for lp in w]
    if not scored:
        raise ValueError("no scored token")
    mean_nll = -math.fsum(scored) / len(scored)
    return PerplexityResult(math.exp(mean_nll), mean_nll, len(scored), len(per_window), n_ctx)


def engine_perplexity(engine, token_ids: Sequence[int], n_ctx: int, bos_id: int | None) -> PerplexityResult:
    """Perplexity of `token_ids` on `engine` (an `LLMEngine` whose `max_input_tokens` holds `n_ctx`): every
    window one request with prompt logprobs and a single generated token."""
    from tgi.core.sampling_params import SamplingParams

    ws = windows(token_ids, n_ctx, bos_id)
    params = SamplingParams(max_new_tokens=1, ignore_eos=True, prompt_logprobs=True)
    results = engine.generate([w.token_ids for w in ws], params)
    scored = []
    for w, result in zip(ws, results, strict=True):
        logprobs = [t.logprob for t in result.final.prompt_tokens]  # [None, lp(1 | 0), lp(2 | 0..1), ...]
        if len(logprobs) != len(w.token_ids):
            raise RuntimeError(f"{len(logprobs)} prompt logprobs for a window of {len(w.token_ids)} tokens")
        scored.append(logprobs[w.first_scored :])
    return from_logprobs(scored, n_ctx)


def perplexity_engine_config(model_id: str | None, n_ctx: int, dtype: str | None, quantize: str | None):
    """An `EngineConfig` for `engine_perplexity`: windows of `n_ctx` tokens, up to four prefilled per step,
    no prefix cache (windows share no prefix; the cache would only cost memory)."""
    from tgi.core.config import EngineConfig

    seqs = 4
    return EngineConfig(
        model_id=model_id,
        dtype=dtype,
        quantize=quantize,
        max_input_tokens=n_ctx,
        max_total_tokens=n_ctx + 1,
        max_batch_prefill_tokens=seqs * n_ctx,
        max_batch_total_tokens=seqs * (n_ctx + 16),
        max_num_seqs=seqs,
        prefix_caching=False,
    )
