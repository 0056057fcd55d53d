"""Vectorised logits processing for `TorchSampler`: penalties, truncation (top-k, top-p, typical-p,
top-n-sigma, min-p, XTC) and counter-based noise.

Every function works on a whole batch `[N, V]` with per-row parameter tensors `[N]` (or `[N, 1]`) and has no
Python loop over rows. Functions that take `logits` and return a tensor modify `logits` IN PLACE and return it;
the caller (`TorchSampler`) hands them its own copy.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import torch

from tgi.core.torch.host_transfer import to_device

_MASK64 = (1 << 64) - 1


def _i64(x: int) -> int:
    """An unsigned 64-bit constant as the signed int64 with the same bits."""
    x &= _MASK64
    return x - (1 << 64) if x >= 1 << 63 else x


_GOLDEN = _i64(0x9E3779B97F4A7C15)
_MIX1 = _i64(0xBF58476D1CE4E5B9)
_MIX2 = _i64(0x94D049BB133111EB)
_STREAM = _i64(0xD1B54A32D192ED03)
_WATERMARK_KEY = _i64(0x7F4A7C159E3779B9)  # tgi.core.interfaces.sampling.WATERMARK_KEY
_WATERMARK_STREAM = _i64(0xA0761D6478BD642F)  # ... WATERMARK_STREAM


def _shr(z: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 bits (torch's `>>` is arithmetic on negative values)."""
    return (z >> s) & ((1 << (64 - s)) - 1)


def mix64(z: torch.Tensor) -> torch.Tensor:
    """splitmix64's finaliser on int64 tensors (multiplication wraps modulo 2^64, as in C)."""
    z = (z ^ _shr(z, 30)) * _MIX1
    z = (z ^ _shr(z, 27)) * _MIX2
    return z ^ _shr(z, 31)


def seed_to_i64(seed: int) -> int:
    """A seed in [0, 2^64) (or any int) as a signed int64 with the same low 64 bits."""
    return _i64(seed)


def _mix64_(z: torch.Tensor) -> torch.Tensor:
    """`mix64` in place on `z` (a temporary the caller owns): the same bits, no [N, V] allocation per op."""
    t = _shr(z, 30)
    z ^= t
    z *= _MIX1
    t = _shr(z, 27)
    z ^= t
    z *= _MIX2
    t = _shr(z, 31)
    z ^= t
    return z


def _row_bases(seeds: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    return mix64(mix64(seeds * _STREAM + _GOLDEN) + steps * _GOLDEN)  # [N]


def _uniform_from_bits(z: torch.Tensor) -> torch.Tensor:
    # top 23 bits -> (bits + 0.5) / 2^23, exactly representable in float32 and strictly below 1 (with 24
    # bits the largest value rounds to 1.0: an exponential of 0, a token that wins every draw)
    return _shr(z, 41).to(torch.float32).add_(0.5).mul_(1.0 / (1 << 23))


def hash_uniform(seeds: torch.Tensor, steps: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Uniform noise in (0, 1), `[N, vocab_size]` float32, a pure function of (seed, step, vocab index).

    `seeds`, `steps`: `[N]` int64 on the target device. Row i depends only on (seeds[i], steps[i]), so a
    seeded row gets the same noise whatever else is in the batch; each step gets fresh noise.
    """
    idx = torch.arange(1, vocab_size + 1, device=seeds.device, dtype=torch.int64)
    z = _row_bases(seeds, steps)[:, None] + idx[None, :] * _GOLDEN  # [N, V]
    return _uniform_from_bits(_mix64_(z))


def hash_uniform_at(seeds: torch.Tensor, steps: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """`hash_uniform(seeds, steps, V).gather(1, token_ids)` for `token_ids` `[N, K]` int64 (any ids below
    V), computed for those K ids only: the same bits."""
    z = _row_bases(seeds, steps)[:, None] + (token_ids + 1) * _GOLDEN  # [N, K]
    return _uniform_from_bits(_mix64_(z))


def exponential_noise(seeds: torch.Tensor, steps: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Exp(1) noise `[N, V]` (strictly positive): argmax(probs / E) is a draw from `probs`."""
    return hash_uniform(seeds, steps, vocab_size).log_().neg_()


def exponential_noise_at(seeds: torch.Tensor, steps: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """`exponential_noise` at `token_ids` `[N, K]` only (see `hash_uniform_at`)."""
    return hash_uniform_at(seeds, steps, token_ids).log_().neg_()


def watermark_green(prev_tokens: torch.Tensor, gamma: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """`[N, vocab_size]` bool: token j is green after row i's previous token (`prev_tokens` `[N]` int64)
    when `watermark_uniform(prev, j) < gamma[i]` (`tgi.core.interfaces.sampling`), the same bits on any
    device."""
    base = mix64(prev_tokens * _WATERMARK_STREAM + _WATERMARK_KEY)  # [N]
    idx = torch.arange(1, vocab_size + 1, device=prev_tokens.device, dtype=torch.int64)
    z = mix64(base[:, None] + idx[None, :] * _GOLDEN)  # [N, V]
    u = (_shr(z, 41).to(torch.float32) + 0.5) * (1.0 / (1 << 23))
    return u < gamma.to(torch.float32)[:, None]


def apply_watermark(
    logits: torch.Tensor, prev_tokens: torch.Tensor, gamma: torch.Tensor, delta: torch.Tensor
) -> torch.Tensor:
    """Add `delta[i]` to the logits of row i's green tokens (rows with delta 0 are unchanged). In place."""
    green = watermark_green(prev_tokens, gamma, logits.shape[1])
    logits += green.to(logits.dtype) * delta.to(logits.dtype)[:, None]
    return logits


def padded_token_tensor(
    token_lists: Sequence[Sequence[int]], pad: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """`[N, L]` int64 tokens padded with `pad`, and `[N, L]` bool mask of real entries."""
    n = len(token_lists)
    max_len = max((len(t) for t in token_lists), default=0)
    flat = torch.full((n, max(max_len, 1)), pad, dtype=torch.int64)
    lengths = torch.tensor([len(t) for t in token_lists], dtype=torch.int64)
    valid = torch.arange(flat.shape[1])[None, :] < lengths[:, None]
    if max_len:
        flat[valid] = torch.tensor([t for toks in token_lists for t in toks], dtype=torch.int64)
    return flat.to(device, non_blocking=True), valid.to(device, non_blocking=True)


def token_counts(tokens: torch.Tensor, weights: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """`[N, V]` float32 sum of `weights` per token id via scatter_add; ids >= vocab_size (padding) dropped."""
    counts = torch.zeros(tokens.shape[0], vocab_size + 1, dtype=torch.float32, device=tokens.device)
    counts.scatter_add_(1, tokens.clamp(max=vocab_size), weights.to(torch.float32))
    return counts[:, :vocab_size]


def apply_repetition_penalty(logits: torch.Tensor, seen: torch.Tensor, penalty: torch.Tensor) -> torch.Tensor:
    """CTRL / TGI: for tokens seen (prompt + output), positive logits are divided by the penalty and
    negative ones multiplied. `seen` `[N, V]` bool, `penalty` `[N]`. In place."""
    p = penalty[:, None].to(logits.dtype)
    penalised = torch.where(logits > 0, logits / p, logits * p)
    return logits.copy_(torch.where(seen, penalised, logits))


def apply_frequency_presence(
    logits: torch.Tensor, output_counts: torch.Tensor, frequency: torch.Tensor, presence: torch.Tensor
) -> torch.Tensor:
    """OpenAI: logit -= frequency * count + presence * (count > 0), over OUTPUT tokens. In place."""
    logits -= output_counts * frequency[:, None] + (output_counts > 0).to(logits.dtype) * presence[:, None]
    return logits


def apply_top_k_top_p(
    logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, max_k: int | None = None
) -> torch.Tensor:
    """Keep each row's `top_k` best tokens (0 = all), then the smallest prefix of them (by probability)
    whose mass reaches `top_p` (1 = all), always at least one token; the rest become -inf. Ties at the k-th
    place are broken by sort order (exactly k tokens kept). In place.

    `max_k`: pass the largest `top_k` when every row with `top_p < 1` also has `top_k > 0`; then only the
    `max_k` best candidates are sorted (`topk`) instead of the whole vocabulary."""
    return top_k_top_p_candidates(logits, top_k, top_p, max_k)[0]


def top_k_top_p_candidates(
    logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, max_k: int | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`apply_top_k_top_p`, also returning the `[N, max_k]` ids of the `max_k` candidates it sorted when it
    took the `max_k` path (every token a row keeps is among its candidates), else None."""
    vocab = logits.shape[1]
    partial = max_k is not None and 0 < max_k < vocab
    if partial:
        sorted_logits, sorted_idx = logits.topk(max_k, dim=1)
    else:
        sorted_logits, sorted_idx = logits.sort(dim=1, descending=True)
    pos = torch.arange(sorted_logits.shape[1], device=logits.device)[None, :]
    k = torch.where(top_k > 0, top_k.clamp(max=vocab), vocab)
    remove = pos >= k[:, None]
    sorted_logits.masked_fill_(remove, float("-inf"))
    p = top_p.to(torch.float32)[:, None]
    probs = sorted_logits.softmax(dim=1)
    mass_before = probs.cumsum(dim=1) - probs  # exclusive cumulative mass: first token always kept
    remove |= (mass_before >= p) & (p < 1.0)
    if not partial:
        return logits.scatter_(1, sorted_idx, sorted_logits.masked_fill_(remove, float("-inf"))), None
    keep = torch.zeros_like(logits, dtype=torch.bool).scatter_(1, sorted_idx, ~remove)
    keep |= ((top_k <= 0) & (p[:, 0] >= 1.0))[:, None]  # rows without truncation keep everything
    return logits.masked_fill_(~keep, float("-inf")), sorted_idx


def apply_typical_p(logits: torch.Tensor, typical_p: torch.Tensor) -> torch.Tensor:
    """Locally typical sampling (Meister et al.; HF `TypicalLogitsWarper`, min_tokens_to_keep=1): keep the
    tokens whose surprisal is closest to the entropy until their mass reaches `typical_p`. Rows with
    typical_p == 1 are left unchanged. In place."""
    mass = typical_p.to(torch.float32)[:, None]
    logp = logits.log_softmax(dim=1)
    ent = -(logp * logp.exp()).nansum(dim=1, keepdim=True)
    shifted = (-logp - ent).abs()
    sorted_scores, sorted_idx = shifted.sort(dim=1)
    cum = logits.gather(1, sorted_idx).softmax(dim=1).cumsum(dim=1)
    last = (cum < mass).sum(dim=1, keepdim=True).clamp(max=logits.shape[1] - 1)
    remove_sorted = sorted_scores > sorted_scores.gather(1, last)
    remove_sorted[:, 0] = False
    remove_sorted &= mass < 1.0
    remove = torch.zeros_like(remove_sorted).scatter_(1, sorted_idx, remove_sorted)
    return logits.masked_fill_(remove, float("-inf"))


def apply_top_n_sigma(logits: torch.Tensor, n_sigma: torch.Tensor) -> torch.Tensor:
    """llama.cpp's top-n-sigma: keep the logits >= the row's largest minus `n_sigma` standard deviations of
    its finite logits (population formula); rows with n_sigma 0 are left unchanged. In place."""
    finite = logits.isfinite()
    count = finite.sum(dim=1, keepdim=True).clamp(min=1)
    mean = torch.where(finite, logits, 0.0).sum(dim=1, keepdim=True) / count
    var = torch.where(finite, (logits - mean).square(), 0.0).sum(dim=1, keepdim=True) / count
    n = n_sigma.to(logits.dtype)[:, None]
    floor = logits.amax(dim=1, keepdim=True) - n * var.sqrt()
    return logits.masked_fill_((logits < floor) & (n > 0), float("-inf"))


def apply_min_p(logits: torch.Tensor, min_p: torch.Tensor) -> torch.Tensor:
    """vLLM's min-p: drop the tokens whose probability is below `min_p` times the row's largest, i.e. whose
    logit is below the largest + log(min_p) (min_p 0: log 0 = -inf, nothing dropped). In place."""
    floor = logits.amax(dim=1, keepdim=True) + min_p.to(logits.dtype).log()[:, None]
    return logits.masked_fill_(logits < floor, float("-inf"))


def apply_xtc(logits: torch.Tensor, threshold: torch.Tensor, active: torch.Tensor) -> torch.Tensor:
    """llama.cpp's XTC, in the rows where `active` (`[N]` bool: the row's draw fell below its
    xtc_probability): when at least two kept tokens have a probability >= `threshold`, drop all of them but
    the least probable (tokens tied with it stay). In place."""
    probs = logits.softmax(dim=1)
    above = (probs >= threshold.to(probs.dtype)[:, None]) & logits.isfinite()
    least = torch.where(above, probs, float("inf")).amin(dim=1, keepdim=True)
    remove = above & (probs > least) & (active & (above.sum(dim=1) >= 2))[:, None]
    return logits.masked_fill_(remove, float("-inf"))


def xtc_uniform(seeds: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """XTC's draw per row, `[N]` float32 in (0, 1): the noise stream at index -1
    (`tgi.core.interfaces.sampling.xtc_uniform`)."""
    return hash_uniform_at(seeds, steps, torch.full_like(seeds, -1)[:, None])[:, 0]


_BYTE_BIAS: dict[torch.device, torch.Tensor] = {}


def _byte_bias(device: torch.device) -> torch.Tensor:
    """`[256, 8]` float32: for byte value v, 0 where bit b of v is set, -inf where it is clear."""
    table = _BYTE_BIAS.get(device)
    if table is None:
        bits = (torch.arange(256, device=device)[:, None] >> torch.arange(8, device=device)) & 1
        table = torch.zeros(256, 8, device=device).masked_fill_(bits == 0, float("-inf"))
        _BYTE_BIAS[device] = table
    return table


def apply_token_masks(logits: torch.Tensor, masks) -> torch.Tensor:
    """Set the tokens a grammar forbids to -inf, in the rows `masks.rows` (`tgi.core.interfaces.batch.TokenMasks`:
    bit `t % 32` of word `t // 32` allows token t). Tokens past the mask's vocabulary are forbidden. In place.
    """
    if sys.byteorder != "little":
        raise NotImplementedError("token masks are read as little-endian bytes; this machine is big-endian")
    n, vocab = len(masks.rows), logits.shape[1]
    # int32 words as little-endian bytes: byte k of a word holds its bits 8k..8k+7, so bit t of the row
    # is bit t % 8 of byte t // 8; each byte becomes 8 additive biases (0 or -inf) by table lookup, which
    # is several times cheaper than a boolean masked_fill over the [n, vocab] logits
    as_bytes = torch.from_numpy(masks.bitmask).view(torch.uint8).to(logits.device, non_blocking=True)
    bias = _byte_bias(logits.device).index_select(0, as_bytes.reshape(-1).long()).view(n, -1)  # [n, words*32]
    if bias.shape[1] < vocab:
        bias = torch.nn.functional.pad(bias, (0, vocab - bias.shape[1]), value=float("-inf"))
    rows = to_device(masks.rows, torch.int64, logits.device)
    return logits.index_add_(0, rows, bias[:, :vocab])
