"""Core's vectorised torch sampler (the default `Backend.sampler()`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from tgi.core.plugins.logits_processors import LogitsProcessorRegistry, logits_processors
from tgi.core.sampling import processors as P
from tgi.core.sampling.dry import dry_active, dry_penalties
from tgi.core.sampling.logit_bias import LogitBiasTable
from tgi.core.sampling.logits_processor import apply_logits_processors
from tgi.core.sampling.vocab_masks import AllowedTokensTable, apply_bad_words
from tgi.core.torch.host_transfer import to_device
from tgi.core.torch.sampler import Sampler, SamplerOutput

if TYPE_CHECKING:
    from tgi.core.interfaces.batch import ScheduledSequence, TokenMasks


class TorchSampler(Sampler):
    """Masks (grammar, allowed tokens, bad words) -> logit bias -> logits processors -> penalties -> DRY ->
    watermark -> temperature -> top-n-sigma -> min-p -> top-k/top-p -> typical-p -> XTC -> seeded Gumbel-max
    draw, for all rows at once (`tgi.core.interfaces.sampling`).

    Per-row parameters become small `[N]` tensors; all the math is batched (no per-row torch ops). Each step
    runs only when some row of the batch uses it: a batch that uses none of the later additions (min-p,
    top-n-sigma, DRY, XTC, bad words, allowed tokens, processors) runs exactly the ops it ran before them.
    What depends on a row's token history (bad words, DRY) is found on the host, in plain Python
    (`tgi.core.sampling.bad_words`, `tgi.core.sampling.dry`), and scattered into the logits at once.

    * repetition_penalty (CTRL/TGI) reads prompt + output tokens; frequency/presence penalties (OpenAI)
      read output tokens only. Counts come from one scatter_add over a padded `[N, L]` token tensor.
    * temperature applies to `do_sample` rows only; greedy rows take the argmax of the penalised logits.
    * Sampling is counter-based: row noise is a hash of (row.seed, row.num_generated, vocab index), so the
      same seed, step and logits give the same token whatever else shares the batch, on any device.
    * `logprobs` are the log-softmax of the penalised, temperature-scaled logits before truncation, at the
      chosen token; `top_token_ids`/`top_logprobs` (n = max top_n_tokens over rows) come from the same.

    The input `logits` are never modified: when processing is needed the sampler works on a copy.

    `greedy_kernel` (a backend's seam, like the models' kernels): `logits [N, V] -> (token_ids [N] int64,
    logprobs [N] float32)`, the argmax of each row (its first maximum) and its log-softmax. When set, batches
    with no penalty, no sampling and no top tokens take it instead of the torch ops.

    `per_row` (batch-invariant mode, `--deterministic`): each row is processed alone, as if it were the only
    one, so that its reductions (softmax, top-k/top-p mass, log-sum-exp) and its path (the greedy kernel or
    the torch ops) never depend on the other rows: the batched code's shapes (`max_k`, the widest top-n)
    and choices come from the whole batch. Slower for large batches of sampled rows.
    """

    supports_token_masks = True

    def __init__(
        self, greedy_kernel=None, per_row: bool = False, processors: LogitsProcessorRegistry | None = None
    ) -> None:
        self.greedy_kernel = greedy_kernel
        self.per_row = per_row
        self.logit_bias = LogitBiasTable()  # each request's bias tensors, built at its first step
        self.allowed = AllowedTokensTable()  # each request's allowed ids, built at its first step
        # where the processors rows select are found by name (default: this process's registry)
        self.processors = processors if processors is not None else logits_processors()

    def sample(
        self, logits: torch.Tensor, rows: Sequence[ScheduledSequence], token_masks: TokenMasks | None = None
    ) -> SamplerOutput:
        if logits.dim() != 2 or logits.shape[0] != len(rows):
            raise ValueError(f"logits {tuple(logits.shape)} do not match {len(rows)} rows")
        n, vocab = logits.shape
        device = logits.device
        params = [r.sampling for r in rows]
        if n == 0:
            empty = torch.empty(0, dtype=torch.int64, device=device)
            return SamplerOutput(empty, torch.empty(0, dtype=torch.float32, device=device))

        rep = [p.repetition_penalty for p in params]
        freq = [p.frequency_penalty for p in params]
        pres = [p.presence_penalty for p in params]
        do_sample = [p.do_sample for p in params]
        need_rep = any(x != 1.0 for x in rep)
        need_freq = any(x != 0.0 for x in freq) or any(x != 0.0 for x in pres)
        need_bias = any(p.logit_bias for p in params)
        need_mark = any(p.watermark is not None for p in params)
        need_allowed = any(p.allowed_token_ids is not None for p in params)
        need_bad = any(p.bad_words_ids for p in params)
        need_proc = any(p.logits_processors for p in params)
        need_dry = any(dry_active(p) for p in params)
        any_sample = any(do_sample)
        # any processing before the temperature (the greedy kernel takes none)
        need_any = any(
            (need_bias, need_rep, need_freq, need_mark, need_allowed, need_bad, need_proc, need_dry)
        )
        top_n = max(p.top_n_tokens for p in params)
        if token_masks is not None:  # our own float32 copy, with the tokens no grammar allows at -inf
            logits = P.apply_token_masks(
                logits.float() if logits.dtype != torch.float32 else logits.clone(), token_masks
            )
        if self.per_row and n > 1:  # token masks applied above: each row is now sampled as if alone
            return _stack_rows([self.sample(logits[i : i + 1], rows[i : i + 1]) for i in range(n)], top_n)
        if self.greedy_kernel is not None and not (need_any or any_sample or top_n):
            token_ids, logprobs = self.greedy_kernel(logits)
            return SamplerOutput(token_ids=token_ids, logprobs=logprobs)

        x = logits if logits.dtype == torch.float32 else logits.float()
        if (need_any or any_sample) and token_masks is None:
            x = x.clone() if x is logits else x  # every processor below works in place on our copy

        if need_allowed:
            self.allowed.apply(x, params)
        if need_bad:
            apply_bad_words(x, rows)
        if need_bias:
            self.logit_bias.apply(x, params)
        if need_proc:
            apply_logits_processors(x, rows, self.processors.get)

        if need_rep or need_freq:
            self._apply_penalties(x, rows, rep, freq, pres, need_rep, need_freq)
        if need_dry:
            _apply_dry(x, rows)

        if need_mark:  # each row's green list comes from its previous token
            marks = [p.watermark for p in params]
            P.apply_watermark(
                x,
                to_device([r.all_token_ids[-1] for r in rows], torch.int64, device),
                to_device([m.gamma if m else 0.0 for m in marks], torch.float32, device),
                to_device([m.delta if m else 0.0 for m in marks], torch.float32, device),
            )

        if any_sample:
            sample_mask = to_device(do_sample, torch.bool, device)
            temps = [p.temperature if p.do_sample else 1.0 for p in params]
            if any(t != 1.0 for t in temps):
                x /= to_device(temps, torch.float32, device)[:, None]

        # what is reported (before truncation): log_softmax at the chosen (and top) ids only, from one
        # logsumexp pass instead of a full [N, vocab] log_softmax
        lse = torch.logsumexp(x, dim=1, keepdim=True)
        greedy_ids = x.argmax(dim=1)
        tops = x.topk(min(top_n, vocab), dim=1) if top_n > 0 else None  # before truncation: the spec's

        if any_sample:
            token_ids = self._draw(x, rows, params, sample_mask, greedy_ids)
        else:
            token_ids = greedy_ids

        out = SamplerOutput(token_ids=token_ids, logprobs=(x.gather(1, token_ids[:, None]) - lse).squeeze(1))
        if tops is not None:
            out.top_token_ids, out.top_logprobs = tops.indices, tops.values - lse
        return out

    @staticmethod
    def _apply_penalties(
        x: torch.Tensor,
        rows: Sequence[ScheduledSequence],
        rep: list[float],
        freq: list[float],
        pres: list[float],
        need_rep: bool,
        need_freq: bool,
    ) -> None:
        vocab, device = x.shape[1], x.device
        # Only ship the history each row needs: all tokens for a repetition penalty, else the output.
        starts, lists = [], []
        for r, rp, f, pr in zip(rows, rep, freq, pres, strict=True):
            if rp != 1.0:
                starts.append(r.num_prompt_tokens)  # output tokens start after the prompt
                lists.append(r.all_token_ids)
            elif f != 0.0 or pr != 0.0:
                starts.append(0)
                lists.append(r.all_token_ids[r.num_prompt_tokens :])
            else:
                starts.append(0)
                lists.append(())
        tokens, valid = P.padded_token_tensor(lists, pad=vocab, device=device)
        if need_rep:
            seen = P.token_counts(tokens, valid, vocab) > 0
            P.apply_repetition_penalty(x, seen, to_device(rep, torch.float32, device))
        if need_freq:
            pos = torch.arange(tokens.shape[1], device=device)[None, :]
            start_t = to_device(starts, torch.int64, device)[:, None]
            counts = P.token_counts(tokens, valid & (pos >= start_t), vocab)
            P.apply_frequency_presence(
                x,
                counts,
                to_device(freq, torch.float32, device),
                to_device(pres, torch.float32, device),
            )

    @staticmethod
    def _draw(
        x: torch.Tensor,
        rows: Sequence[ScheduledSequence],
        params: list,
        sample_mask: torch.Tensor,
        greedy_ids: torch.Tensor,
    ) -> torch.Tensor:
        """Truncate (in place on `x`) and draw with Gumbel-max; greedy rows keep `greedy_ids`.

        When every sampled row has a `top_k`, only the `max(top_k)` candidates can win: their noise alone is
        computed (`exponential_noise_at`, the same bits as the full `[N, V]` noise at those ids) and the
        draw is the first vocabulary index of the best score among them, as `argmax` over the vocabulary
        would pick."""
        device, vocab = x.device, x.shape[1]
        sigma = [p.top_n_sigma if p.do_sample else 0.0 for p in params]
        if any(v > 0 for v in sigma):
            P.apply_top_n_sigma(x, to_device(sigma, torch.float32, device))
        min_p = [p.min_p if p.do_sample else 0.0 for p in params]
        if any(v > 0 for v in min_p):
            P.apply_min_p(x, to_device(min_p, torch.float32, device))
        top_k = [p.top_k if p.do_sample else 0 for p in params]
        top_p = [p.top_p if p.do_sample else 1.0 for p in params]
        typical = [p.typical_p if p.do_sample else 1.0 for p in params]
        candidates = None
        if any(k > 0 for k in top_k) or any(v < 1.0 for v in top_p):
            _, candidates = P.top_k_top_p_candidates(
                x,
                to_device(top_k, torch.int64, device),
                to_device(top_p, torch.float32, device),
                max_k=max(top_k)
                if all(k > 0 or v >= 1.0 for k, v in zip(top_k, top_p, strict=True))
                else None,
            )
            if not all(k > 0 for k, p in zip(top_k, params, strict=True) if p.do_sample):
                candidates = None  # a sampled row keeps the whole vocabulary: every token may win
        if any(v < 1.0 for v in typical):
            P.apply_typical_p(x, to_device(typical, torch.float32, device))
        seeds = to_device([P.seed_to_i64(r.seed) for r in rows], torch.int64, device)
        steps = to_device([r.num_generated for r in rows], torch.int64, device)
        xtc = [p.xtc_probability if p.do_sample else 0.0 for p in params]
        if any(v > 0 for v in xtc):  # the row's draw (seeded, per step) decides whether XTC acts
            active = P.xtc_uniform(seeds, steps) <= to_device(xtc, torch.float32, device)
            P.apply_xtc(x, to_device([p.xtc_threshold for p in params], torch.float32, device), active)
        # Gumbel-max in log space: argmax(logits - log E), E ~ Exp(1); -inf (truncated) never wins.
        if candidates is None:
            scores = x - P.exponential_noise(seeds, steps, vocab).log_()
            return torch.where(sample_mask, scores.argmax(dim=1), greedy_ids)
        scores = x.gather(1, candidates).sub_(P.exponential_noise_at(seeds, steps, candidates).log_())
        best = scores.max(dim=1, keepdim=True).values
        first = torch.where(scores == best, candidates, vocab).amin(dim=1)  # argmax's tie-break: lowest id
        return torch.where(sample_mask, first, greedy_ids)


def _apply_dry(x: torch.Tensor, rows: Sequence[ScheduledSequence]) -> torch.Tensor:
    """Subtract each row's DRY penalties (found on the host, `tgi.core.sampling.dry`) with one scatter. In
    place."""
    at_rows, at_tokens, amounts = [], [], []
    for i, r in enumerate(rows):
        for token, amount in dry_penalties(r.all_token_ids, r.sampling).items():
            at_rows.append(i)
            at_tokens.append(token)
            amounts.append(-amount)
    if at_rows:
        index = (to_device(at_rows, torch.int64, x.device), to_device(at_tokens, torch.int64, x.device))
        x.index_put_(index, to_device(amounts, torch.float64, x.device).to(x.dtype), accumulate=True)
    return x


def _stack_rows(outputs: list[SamplerOutput], top_n: int) -> SamplerOutput:
    """One-row outputs as one output; top tokens padded to the batch's widest `top_n` (each row's own
    `top_n_tokens` are read, the padding never)."""
    out = SamplerOutput(
        token_ids=torch.cat([o.token_ids for o in outputs]), logprobs=torch.cat([o.logprobs for o in outputs])
    )
    if top_n > 0:
        ids, logprobs = [], []
        for o in outputs:
            width = 0 if o.top_token_ids is None else o.top_token_ids.shape[1]
            row_ids = o.token_ids.new_zeros(1, top_n)
            row_lp = o.logprobs.new_full((1, top_n), float("-inf"))
            if width:
                row_ids[:, :width], row_lp[:, :width] = o.top_token_ids, o.top_logprobs
            ids.append(row_ids)
            logprobs.append(row_lp)
        out.top_token_ids, out.top_logprobs = torch.cat(ids), torch.cat(logprobs)
    return out
