"""TGI's sampling (`tgi.core.interfaces.sampling`) for the JAX runner: the arithmetic on the device, the
per-row inputs built on the host as fixed-shape numpy arrays `[S, V]` / `[S]` (S: the step's sequence
bucket), so one executable per bucket serves every mix of parameters.

Two variants, both compiled at warm-up for every sequence bucket:

* `greedy` (no row samples, penalises, biases, watermarks or is masked): argmax and its log-softmax;
* `full`: grammar masks, allowed tokens, bad words and logit bias (one additive `[S, V]` bias, 0/-inf for
  masks), the repetition, frequency and presence penalties (`seen`/`counts` `[S, V]`), DRY and the
  watermark (one additive `[S, V]` after the penalties), temperature, top-n-sigma, min-p, top-k, top-p,
  typical-p, XTC and the Gumbel-max draw.

What reads a row's token history (bad words, DRY's penalties) is found on the host by core's plain-Python
functions (`tgi.core.sampling.bad_words`, `tgi.core.sampling.dry`) and rides on those additive arrays; XTC's
draw (`spec.xtc_uniform`) is made on the host too. Logits processors are torch plugins: this sampler refuses
them (`UNSUPPORTED_SAMPLING`), and the engine refuses a request that selects one, by name.

Both return the `TOP_N` best tokens' log-softmax (the engine keeps each request's `top_n_tokens`), and the
whole log-softmax `[S, V]`, left on the device unless a row asks for more than `TOP_N` alternatives.

The counter-based bits (the draw's noise `uniform_noise(seed, step, vocab)` and the watermark's green lists)
are made by numpy on the host: they are splitmix64 hashes on unsigned 64-bit integers, which JAX computes
only with `jax_enable_x64`, a process-wide switch this backend does not flip. They are exact (the same bits
as core's torch sampler and the reference), and only built for steps that need them.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from tgi.core.interfaces import sampling as spec
from tgi.core.interfaces.batch import ScheduledSequence, TokenMasks
from tgi.core.sampling.bad_words import banned_tokens
from tgi.core.sampling.dry import dry_active, dry_penalties

#: the alternatives computed per row (OpenAI's top_logprobs allows 20; TGI's default limit is 5)
TOP_N = 20
#: the `SamplingParams` fields this sampler does not honour (the runner reports them; the engine refuses them)
UNSUPPORTED_SAMPLING = frozenset({"logits_processors"})
#: the per-row scalars of the `full` variant, in the columns of `FullInputs.params`
PARAM_COLUMNS = (
    "temperature", "do_sample", "top_k", "top_p", "typical_p", "repetition_penalty", "frequency_penalty",
    "presence_penalty", "top_n_sigma", "min_p", "xtc_threshold", "xtc_active",
)  # fmt: skip
_U64 = np.uint64


def _mix64(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> _U64(30))) * _U64(spec.MIX1)
    z = (z ^ (z >> _U64(27))) * _U64(spec.MIX2)
    return z ^ (z >> _U64(31))


def _to_unit(z: np.ndarray) -> np.ndarray:
    return ((z >> _U64(64 - spec.NOISE_BITS)).astype(np.float32) + np.float32(0.5)) * np.float32(
        1.0 / (1 << spec.NOISE_BITS)
    )


def uniform_noise(seeds: list[int], steps: list[int], vocab: int) -> np.ndarray:
    """`spec.uniform_noise` for many rows at once: `[len(seeds), vocab]` float32."""
    s = np.array([x & spec.MASK64 for x in seeds], dtype=_U64)
    st = np.array([x & spec.MASK64 for x in steps], dtype=_U64)
    base = _mix64(_mix64(s * _U64(spec.STREAM) + _U64(spec.GOLDEN)) + st * _U64(spec.GOLDEN))
    idx = np.arange(1, vocab + 1, dtype=_U64)
    return _to_unit(_mix64(base[:, None] + idx[None, :] * _U64(spec.GOLDEN)))


def watermark_uniform(prev_tokens: list[int], vocab: int) -> np.ndarray:
    """`spec.watermark_uniform(prev, j)` for rows' previous tokens: `[len(prev_tokens), vocab]` float32."""
    p = np.array([x & spec.MASK64 for x in prev_tokens], dtype=_U64)
    base = _mix64(p * _U64(spec.WATERMARK_STREAM) + _U64(spec.WATERMARK_KEY))
    idx = np.arange(1, vocab + 1, dtype=_U64)
    return _to_unit(_mix64(base[:, None] + idx[None, :] * _U64(spec.GOLDEN)))


def needs_full(rows: list[ScheduledSequence], masks: TokenMasks | None) -> bool:
    for r in rows:
        p = r.sampling
        if p.do_sample or p.repetition_penalty != 1.0 or p.frequency_penalty or p.presence_penalty:
            return True
        if p.logit_bias or p.watermark is not None:
            return True
        if p.allowed_token_ids is not None or p.bad_words_ids or dry_active(p):
            return True
    return masks is not None


@dataclass
class FullInputs:
    """The host arrays of the `full` variant (see the module docstring), for S rows."""

    bias: np.ndarray  # [S, V]: masks (-inf), allowed tokens and bad words (-inf), logit bias
    seen: np.ndarray
    counts: np.ndarray
    late: np.ndarray  # [S, V], added after the penalties: DRY's penalties and the watermark's green list
    noise: np.ndarray
    params: np.ndarray  # [S, len(PARAM_COLUMNS)] float32

    def arrays(self) -> tuple:
        return self.bias, self.seen, self.counts, self.late, self.noise, self.params


def full_inputs(
    rows: list[ScheduledSequence], masks: TokenMasks | None, num_rows: int, vocab: int
) -> FullInputs:
    """The `full` variant's inputs for `rows` (padded to `num_rows` neutral greedy rows)."""
    f32 = np.float32
    bias = np.zeros((num_rows, vocab), f32)
    if masks is not None:
        bits = np.unpackbits(masks.bitmask.view(np.uint8), axis=1, bitorder="little")[:, :vocab]
        allowed = np.zeros((len(masks.rows), vocab), bool)
        allowed[:, : bits.shape[1]] = bits.astype(bool)
        bias[list(masks.rows)] = np.where(allowed, f32(0), f32(-np.inf))
    seen = np.zeros((num_rows, vocab), bool)
    counts = np.zeros((num_rows, vocab), f32)
    late = np.zeros((num_rows, vocab), f32)
    params = np.zeros((num_rows, len(PARAM_COLUMNS)), f32)
    params[:, 0] = params[:, 3] = params[:, 4] = params[:, 5] = 1.0
    sampled, marked = [], []
    for i, r in enumerate(rows):
        p = r.sampling
        _history_inputs(r, bias[i], late[i])
        for token, b in p.logit_bias:
            bias[i, token] += f32(b)
        if p.repetition_penalty != 1.0:
            seen[i, np.asarray(r.all_token_ids, np.int64)] = True
        if p.frequency_penalty or p.presence_penalty:
            out = np.asarray(r.all_token_ids[r.num_prompt_tokens :], np.int64)
            counts[i] = np.bincount(out, minlength=vocab)[:vocab]
        if p.watermark is not None:
            marked.append(i)
        if p.do_sample:
            sampled.append(i)
        xtc = (
            p.do_sample
            and p.xtc_probability > 0
            and spec.xtc_uniform(r.seed, r.num_generated) <= p.xtc_probability
        )
        params[i] = (
            p.temperature if p.do_sample else 1.0, float(p.do_sample), p.top_k if p.do_sample else 0,
            p.top_p if p.do_sample else 1.0, p.typical_p if p.do_sample else 1.0,
            p.repetition_penalty, p.frequency_penalty, p.presence_penalty,
            p.top_n_sigma if p.do_sample else 0.0, p.min_p if p.do_sample else 0.0, p.xtc_threshold, float(xtc),
        )  # fmt: skip
    if marked:
        u = watermark_uniform([rows[i].all_token_ids[-1] for i in marked], vocab)
        for j, i in enumerate(marked):
            w = rows[i].sampling.watermark
            late[i] += np.where(u[j] < f32(w.gamma), f32(w.delta), f32(0))
    noise = np.full((num_rows, vocab), 0.5, f32)
    if sampled:
        noise[sampled] = uniform_noise(
            [rows[i].seed for i in sampled], [rows[i].num_generated for i in sampled], vocab
        )
    return FullInputs(bias, seen, counts, late, noise, params)


def _history_inputs(r: ScheduledSequence, bias: np.ndarray, late: np.ndarray) -> None:
    """Row `r`'s allowed tokens and bad words into its `bias` (-inf), its DRY penalties into `late`."""
    p = r.sampling
    if p.allowed_token_ids is not None:
        allowed = np.zeros(bias.shape[0], bool)
        allowed[list(p.allowed_token_ids)] = True
        bias[~allowed] = -np.inf
    if p.bad_words_ids:
        bias[sorted(banned_tokens(p.bad_words_ids, r.all_token_ids[r.num_prompt_tokens :]))] = -np.inf
    for token, amount in dry_penalties(r.all_token_ids, p).items():
        late[token] -= np.float32(amount)


def _top(x, lse):
    top_x, top_ids = jax.lax.top_k(x, min(TOP_N, x.shape[1]))
    return top_ids.astype(jnp.int32), top_x - lse, x - lse


def greedy(logits):
    """(token ids [S], logprobs [S], top ids [S, TOP_N], top logprobs [S, TOP_N], log-softmax [S, V])."""
    lse = jax.nn.logsumexp(logits, axis=1, keepdims=True)
    ids = jnp.argmax(logits, axis=1)
    logprobs = jnp.take_along_axis(logits, ids[:, None], axis=1)[:, 0] - lse[:, 0]
    return (ids.astype(jnp.int32), logprobs, *_top(logits, lse))


def _top_k_top_p(x, top_k, top_p):
    vocab = x.shape[1]
    order = jnp.argsort(-x, axis=1, stable=True)
    sorted_x = jnp.take_along_axis(x, order, axis=1)
    pos = jnp.arange(vocab)[None, :]
    k = jnp.where(top_k > 0, jnp.minimum(top_k, vocab), vocab)
    remove = pos >= k[:, None]
    sorted_x = jnp.where(remove, -jnp.inf, sorted_x)
    probs = jax.nn.softmax(sorted_x, axis=1)
    mass_before = jnp.cumsum(probs, axis=1) - probs
    remove = remove | ((mass_before >= top_p[:, None]) & (top_p[:, None] < 1.0))
    kept = jnp.where(remove, -jnp.inf, sorted_x)
    return jnp.take_along_axis(kept, jnp.argsort(order, axis=1), axis=1)


def _typical(x, typical_p):
    mass = typical_p[:, None]
    logp = jax.nn.log_softmax(x, axis=1)
    ent = -jnp.nansum(logp * jnp.exp(logp), axis=1, keepdims=True)
    shifted = jnp.abs(-logp - ent)
    order = jnp.argsort(shifted, axis=1, stable=True)
    sorted_scores = jnp.take_along_axis(shifted, order, axis=1)
    cum = jnp.cumsum(jax.nn.softmax(jnp.take_along_axis(x, order, axis=1), axis=1), axis=1)
    last = jnp.minimum(jnp.sum(cum < mass, axis=1, keepdims=True), x.shape[1] - 1)
    remove = sorted_scores > jnp.take_along_axis(sorted_scores, last, axis=1)
    remove = remove.at[:, 0].set(False) & (mass < 1.0)
    remove = jnp.take_along_axis(remove, jnp.argsort(order, axis=1), axis=1)
    return jnp.where(remove, -jnp.inf, x)


def _top_n_sigma(x, n_sigma):
    finite = jnp.isfinite(x)
    count = jnp.maximum(jnp.sum(finite, axis=1, keepdims=True), 1)
    mean = jnp.sum(jnp.where(finite, x, 0.0), axis=1, keepdims=True) / count
    std = jnp.sqrt(jnp.sum(jnp.where(finite, (x - mean) ** 2, 0.0), axis=1, keepdims=True) / count)
    n = n_sigma[:, None]
    return jnp.where((x < jnp.max(x, axis=1, keepdims=True) - n * std) & (n > 0), -jnp.inf, x)


def _min_p(x, min_p):
    return jnp.where(x < jnp.max(x, axis=1, keepdims=True) + jnp.log(min_p)[:, None], -jnp.inf, x)


def _xtc(x, threshold, active):
    probs = jax.nn.softmax(x, axis=1)
    above = (probs >= threshold[:, None]) & jnp.isfinite(x)
    least = jnp.min(jnp.where(above, probs, jnp.inf), axis=1, keepdims=True)
    acts = active & (jnp.sum(above, axis=1) >= 2)
    return jnp.where(above & (probs > least) & acts[:, None], -jnp.inf, x)


def full(logits, bias, seen, counts, late, noise, params):
    """The processors in `tgi.core.interfaces.sampling`'s order, then the draw (see the module docstring)."""
    temp, do_sample, top_k = params[:, 0], params[:, 1] > 0, params[:, 2].astype(jnp.int32)
    top_p, typical_p, rep, freq, pres = params[:, 3], params[:, 4], params[:, 5], params[:, 6], params[:, 7]
    n_sigma, min_p, xtc_threshold, xtc_active = params[:, 8], params[:, 9], params[:, 10], params[:, 11] > 0
    x = logits + bias
    r = rep[:, None]
    x = jnp.where(seen, jnp.where(x > 0, x / r, x * r), x)
    x = x - (counts * freq[:, None] + (counts > 0).astype(x.dtype) * pres[:, None])
    x = x + late
    greedy_ids = jnp.argmax(x, axis=1)
    x = jnp.where(do_sample[:, None], x / temp[:, None], x)
    lse = jax.nn.logsumexp(x, axis=1, keepdims=True)
    y = _min_p(_top_n_sigma(x, n_sigma), min_p)
    y = _xtc(_typical(_top_k_top_p(y, top_k, top_p), typical_p), xtc_threshold, xtc_active)
    scores = y - jnp.log(-jnp.log(noise))
    ids = jnp.where(do_sample, jnp.argmax(scores, axis=1), greedy_ids)
    logprobs = jnp.take_along_axis(x, ids[:, None], axis=1)[:, 0] - lse[:, 0]
    return (ids.astype(jnp.int32), logprobs, *_top(x, lse))
