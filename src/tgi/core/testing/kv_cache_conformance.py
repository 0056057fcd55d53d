"""The KV cache dtype check of the runner-level conformance suite (`runner_conformance.RunnerConformance`):
every quantized `--kv-cache-dtype` is either refused at start, naming the flag, or computes what the model's
own dtype does, within stated tolerances.

Compared teacher-forced, never free-running (a near-tie of the random-weight model flips a greedy token and
every token after it): the conformance prompt (45 tokens, prefilled in chunks where the runner chunks, so
that a later chunk reads the earlier one's keys from the quantized cache) then the tokens `transformers`
generates greedily from it, fed one decode at a time. On both engines, the same positions give:

- the prompt's logprobs (where the runner returns them): each within `KV_TOLERANCE` of the unquantized's;
- each decode's top token and its logprob: the same token wherever the unquantized engine's two best are
  more than `MARGIN` apart, its logprob within `KV_TOLERANCE`.

The tolerances hold the quantization's own error with room: one byte a value and a scale per token and kv
head rounds each key and value by at most half a step: 1/254 of the head's largest value for int8, 2^-4 and
2^-3 relative for float8 e4m3 and e5m2. Measured on the CPU backend (float32 engine, both attentions): int8
0.018, e4m3 0.054, e5m2 0.19 at most, over the prompt and the decodes.
"""

from __future__ import annotations

import pytest

from tgi.core.interfaces.types import KV_CACHE_DTYPES
from tgi.core.testing.conformance_engines import ConformanceEngines
from tgi.core.testing.model import PROMPTS

#: the largest |logprob difference| allowed, per KV dtype, between a quantized cache's and the model's dtype's
KV_TOLERANCE = {"int8": 0.04, "fp8_e4m3fn": 0.15, "fp8_e5m2": 0.4}
#: the unquantized engine's top two logprobs apart by more than this: the quantized engine's top token agrees
MARGIN = 0.3


def teacher_forced(engine, tokens: list[int], prompt_len: int) -> tuple[list[float], list[tuple]]:
    """`tokens`' prompt logprobs (empty where the runner returns none) and, for each position from
    `prompt_len` on, the runner's (top token, its logprob, the second's logprob), feeding `tokens` itself."""
    from tgi.core.interfaces.batch import ScheduledBatch, ScheduledSequence
    from tgi.core.sampling_params import SamplingParams

    runner, bs = engine.runner, engine.config.block_size
    blocks = list(range(-(-len(tokens) // bs)))  # on blocks no request owns
    params = SamplingParams(top_n_tokens=2)
    want = runner.capabilities().prompt_logprobs
    chunk = engine.config.max_batch_prefill_tokens if runner.constraints().chunked_prefill else prompt_len
    prompt, rows = [], []
    for start in range(0, prompt_len, chunk):
        fed = tokens[start : min(start + chunk, prompt_len)]
        last = start + len(fed) == prompt_len
        seq = ScheduledSequence(
            "kv", fed, start, blocks, True, last, params, 0, prompt_len, tokens[:prompt_len], want
        )
        out = runner.execute(ScheduledBatch(len(rows) + 1, [seq], 1))
        prompt += out.prompt_logprobs.get("kv", [])
    rows.append(out)
    for pos in range(prompt_len, len(tokens) - 1):  # token `pos` fed, the distribution of the next read
        fed = [tokens[pos]]
        seq = ScheduledSequence("kv", fed, pos, blocks, False, True, params, 0, prompt_len, tokens[: pos + 1])
        rows.append(runner.execute(ScheduledBatch(len(rows) + 100, [seq], 0)))
    return prompt, [(r.token_ids[0], r.top_logprobs[0][0], r.top_logprobs[0][1]) for r in rows]


class KVCacheChecks(ConformanceEngines):
    """Each quantized KV dtype: refused by name, or teacher-forced close to the unquantized cache."""

    def test_quantized_kv_cache_is_close_or_refused(
        self, engine_backend, tiny_llama, batches_checked, reference
    ):
        from tgi.core.config import ConfigError

        tokens, prompt_len = list(PROMPTS[0]) + list(reference[0]), len(PROMPTS[0])
        expected = None
        for kv in KV_CACHE_DTYPES[1:]:
            if kv not in engine_backend.kv_cache_dtypes(self.engine_dtype(engine_backend)):
                with pytest.raises(ConfigError, match=f"--kv-cache-dtype {kv}"):
                    self.make_engine(engine_backend, tiny_llama, batches_checked, kv_cache_dtype=kv)
                continue
            if expected is None:
                base = self.make_engine(engine_backend, tiny_llama, batches_checked)
                expected = teacher_forced(base, tokens, prompt_len)
                base_bytes = base.runner.kv_cache_spec().bytes_per_block
            engine = self.make_engine(engine_backend, tiny_llama, batches_checked, kv_cache_dtype=kv)
            spec = engine.runner.kv_cache_spec()
            assert spec.kv_dtype == kv and spec.bytes_per_block < base_bytes, spec
            prompt, rows = teacher_forced(engine, tokens, prompt_len)
            tol = KV_TOLERANCE[kv]
            worst = max((abs(a - b) for a, b in zip(prompt, expected[0], strict=True)), default=0.0)
            for i, ((tok, lp, _), (want, want_lp, second)) in enumerate(zip(rows, expected[1], strict=True)):
                if want_lp - second > MARGIN:
                    assert tok == want, f"{kv}: decode {i} picked {tok}, the unquantized cache {want}"
                if tok == want:
                    worst = max(worst, abs(lp - want_lp))
            print(f"{engine_backend.name} --kv-cache-dtype {kv}: largest logprob difference {worst:.4f}")
            assert worst <= tol, f"{kv}: a logprob {worst:.3g} away from the unquantized cache's (> {tol})"
