"""What sampling means, for every framework: the parameters, the order of the processors, the seeding.

A backend's sampler (core's `TorchSampler`, a JAX sampler, a vendor's) gives each row of a batch of
next-token logits the token and logprob specified here; `tgi.core.testing.reference_sampler` computes them
plainly (one row, one token at a time, float64 Python) and `tgi.core.testing.sampling_cases` holds the cases
every sampler is compared on (no framework: logits are lists of floats).

A row is a `ScheduledSequence`: its `sampling` (`SamplingParams`), its `seed`, its token history
(`all_token_ids`, of which the first `num_prompt_tokens` are the prompt) and `num_generated`. In order:

0. masks, for the rows that have them: a grammar mask (guided decoding; the rows the batch's `TokenMasks`
   names), then `allowed_token_ids` (vLLM's: every other token), then `bad_words_ids` (vLLM's: the last
   token of each sequence whose other tokens are the last ones generated, `all_token_ids` after
   `num_prompt_tokens`; a one-token sequence always): each token they forbid gets logit -inf, so it is never
   chosen and every later step (and the reported logprob) sees the masked logits;
0b. a logit bias (OpenAI's `logit_bias`): each row's `(token id, bias)` pairs are added to those tokens'
   logits (a masked token stays -inf); what follows, the reported logprob included, sees the biased logits;
0c. logits processors (plugins, `tgi.core.sampling.logits_processor`), for the rows that select some: each
   selected processor, in the row's order, returns the row's new logits from its logits, its token history
   and its arguments (a sampler that cannot run them refuses them: `RunnerCapabilities.unsupported_sampling`);
1. penalties, on the logits: the repetition penalty (CTRL / TGI) over the prompt and output tokens (a
   positive logit of a seen token is divided by it, any other multiplied), then the frequency and presence
   penalties (OpenAI) over the output tokens only (`logit -= frequency * count + presence`, for tokens with
   a count);
1a. DRY (llama.cpp's), for rows with `dry_multiplier > 0` and `dry_penalty_last_n != 0`: over the window `w`
   of the last `dry_penalty_last_n` tokens of `all_token_ids` (-1: all of them), `N = len(w)`, nothing when
   `N <= dry_allowed_length`. The limit `L` is the number of tokens after the last sequence breaker: walking
   back from `w[N-1]`, the first position `N-1-i` whose token is a breaker's head and whose next tokens are
   the breaker's tail (`len(tail) <= i`; the longest such tail there, `m`) gives `L = i - m`; no breaker:
   `L = N`; nothing when `L < dry_allowed_length`. For each `j < N-1`, `n_j` is the length of the longest
   common suffix of `w[:j+1]` and `w`, capped at `L`; a token `t` is penalised by
   `dry_multiplier * dry_base ** (n - dry_allowed_length)` where `n = max(n_j : w[j+1] = t,
   n_j >= dry_allowed_length)` (in float64, infinite past its range), the exponent capped at
   `c = floor(88.7228391 / ln(dry_base))` when `dry_base > 1.000001` and `c > 0`; never a token that is a
   breaker alone (a head with no tail);
1b. a watermark (Kirchenbauer et al.; TGI's `watermark`), for rows whose `sampling.watermark` is set: the
   row's previous token `p` (the last of `all_token_ids`) picks a green list, the tokens `j` with
   `watermark_uniform(p, j) < gamma`, and `delta` is added to their logits, in greedy and sampled rows
   alike; what follows (the reported logprob included) sees the watermarked logits. The green list is a pure
   function of (p, j), the same on every device and in every framework (TGI's comes from a device's
   `torch.Generator`), so `tgi.core.watermark` detects it wherever the text was made;
2. a greedy row (`do_sample=False`) takes the first maximum of the logits so far;
3. a sampled row divides them by its temperature, then truncates, in this order (each step sees only the
   tokens the ones before kept, probabilities renormalised over them):
   - top-n-sigma (llama.cpp's, `top_n_sigma > 0`): keeps the tokens whose logit is >= the largest minus
     `top_n_sigma` times the standard deviation (over the finite logits, population formula);
   - min-p (vLLM's, after temperature and before top-k/top-p as vLLM applies it; `min_p > 0`): keeps the
     tokens whose probability is >= `min_p` times the largest;
   - its `top_k` best tokens (0: all), then the smallest prefix of those whose probability reaches `top_p`,
     then the locally typical set: the kept tokens ordered by how far their surprisal is from the entropy,
     up to and including the one whose cumulative probability reaches `typical_p` (and any tied with it);
   - XTC (llama.cpp's; `xtc_probability > 0`): when `xtc_uniform(seed, num_generated) <= xtc_probability`
     and at least two kept tokens have a probability >= `xtc_threshold`, every one of those is removed but
     the least probable (tokens tied with it stay). Here after temperature, like every truncation (llama.cpp
     applies its temperature last by default);
4. the draw is the Gumbel-max trick with counter-based noise: token `argmax_j x_j - log(-log u_j)` over the
   kept tokens, with `u_j = uniform_noise(seed, num_generated, vocab)[j]`: the same seed, step and logits
   give the same token whatever shares the batch, on any device and in any framework;
5. the reported logprob is the log-softmax, at the chosen token, of the logits after masks, bias,
   processors, penalties, DRY, watermark and temperature, and before any truncation; top tokens
   (`top_n_tokens`) are the best of the same log-softmax.
"""

from __future__ import annotations

#: the processors of a sampled row, in the order they apply (a greedy row stops after the penalties)
PROCESSOR_ORDER = (
    "grammar_mask",
    "allowed_token_ids",
    "bad_words",
    "logit_bias",
    "logits_processors",
    "repetition_penalty",
    "frequency_presence_penalty",
    "dry",
    "watermark",
    "temperature",
    "top_n_sigma",
    "min_p",
    "top_k",
    "top_p",
    "typical_p",
    "xtc",
    "gumbel_max_draw",
)

MASK64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15  # splitmix64's increment
STREAM = 0xD1B54A32D192ED03  # spreads seeds apart before they are mixed
MIX1 = 0xBF58476D1CE4E5B9
MIX2 = 0x94D049BB133111EB
#: the noise keeps the top NOISE_BITS bits of each hash: `(bits + 0.5) / 2**NOISE_BITS` is exact in float32
#: and strictly below 1 (with 24 bits the largest value rounds to 1.0, a token that wins every draw)
NOISE_BITS = 23


def splitmix64(z: int) -> int:
    """splitmix64's finaliser on an unsigned 64-bit integer."""
    z = ((z ^ (z >> 30)) * MIX1) & MASK64
    z = ((z ^ (z >> 27)) * MIX2) & MASK64
    return z ^ (z >> 31)


def uniform_noise(seed: int, step: int, vocab_size: int) -> list[float]:
    """The noise of one row at one step: `u_j` in (0, 1) for j in [0, vocab_size), each the top 23 bits of
    `splitmix64(base + (j + 1) * GOLDEN)` mapped to `(bits + 0.5) / 2^23`, where
    `base = splitmix64(splitmix64(seed * STREAM + GOLDEN) + step * GOLDEN)`, all modulo 2^64 (`seed` is
    taken modulo 2^64). Vectorised samplers compute the same bits with wrapping 64-bit integers."""
    seed &= MASK64
    base = splitmix64((splitmix64((seed * STREAM + GOLDEN) & MASK64) + step * GOLDEN) & MASK64)
    shift = 64 - NOISE_BITS
    scale = 1.0 / (1 << NOISE_BITS)
    return [
        ((splitmix64((base + (j + 1) * GOLDEN) & MASK64) >> shift) + 0.5) * scale for j in range(vocab_size)
    ]


def xtc_uniform(seed: int, step: int) -> float:
    """XTC's draw of one row at one step, in (0, 1): the row's noise stream at index -1, i.e. the top 23 bits
    of `splitmix64(base)` mapped to `(bits + 0.5) / 2^23`, with `base` as in `uniform_noise` (whose tokens
    use the indices 0 and up): the same seed gives the same draws, apart from the token draw's noise."""
    seed &= MASK64
    base = splitmix64((splitmix64((seed * STREAM + GOLDEN) & MASK64) + step * GOLDEN) & MASK64)
    return ((splitmix64(base) >> (64 - NOISE_BITS)) + 0.5) / (1 << NOISE_BITS)


#: keys the watermark's green lists (any fixed odd constant; detector and samplers must share it)
WATERMARK_KEY = 0x7F4A7C159E3779B9
WATERMARK_STREAM = 0xA0761D6478BD642F  # spreads previous tokens apart before they are mixed


def watermark_uniform(prev_token: int, token: int) -> float:
    """The watermark's hash of (previous token, token) as a number in (0, 1): the top 23 bits of
    `splitmix64(base + (token + 1) * GOLDEN)` mapped to `(bits + 0.5) / 2^23`, where
    `base = splitmix64(prev_token * WATERMARK_STREAM + WATERMARK_KEY)`, all modulo 2^64. `token` is green
    after `prev_token` when this is below `gamma`: each token is green with probability `gamma` (up to the
    2^-23 grid), independently of the vocabulary's size."""
    base = splitmix64((prev_token * WATERMARK_STREAM + WATERMARK_KEY) & MASK64)
    bits = splitmix64((base + (token + 1) * GOLDEN) & MASK64) >> (64 - NOISE_BITS)
    return (bits + 0.5) / (1 << NOISE_BITS)
