"""TorchSampler: each parameter's effect on a small hand-made distribution, seeding, logprobs, top-n."""

from __future__ import annotations

import math

import pytest
import torch

from tgi.core.interfaces.batch import ScheduledSequence
from tgi.core.sampling import processors as P
from tgi.core.sampling.sampler import TorchSampler
from tgi.core.sampling_params import SamplingParams

V = 8
BASE = torch.tensor([2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, -3.0])


def row(seed: int = 0, prompt=(1, 2), output=(), **kw) -> ScheduledSequence:
    all_ids = list(prompt) + list(output)
    return ScheduledSequence(
        request_id=f"r{seed}",
        token_ids=[all_ids[-1]],
        start_pos=len(all_ids) - 1,
        block_table=[0],
        is_prefill=False,
        sample=True,
        sampling=SamplingParams(**kw),
        seed=seed,
        num_prompt_tokens=len(prompt),
        all_token_ids=all_ids,
    )


def draw_many(n: int, logits=BASE, **kw) -> torch.Tensor:
    """One batch of n rows with seeds 0..n-1 (so one call gives n independent draws)."""
    rows = [row(seed=s, do_sample=True, **kw) for s in range(n)]
    return TorchSampler().sample(logits.expand(n, -1).contiguous(), rows).token_ids


def test_greedy_is_argmax_and_logprob_is_log_softmax():
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0))
    before = logits.clone()
    out = TorchSampler().sample(logits, [row(seed=i) for i in range(3)])
    assert torch.equal(out.token_ids, logits.argmax(1))
    expected = torch.log_softmax(logits, 1).gather(1, out.token_ids[:, None]).squeeze(1)
    torch.testing.assert_close(out.logprobs, expected)
    assert torch.equal(logits, before)  # input untouched
    assert out.top_token_ids is None


def test_empirical_frequencies_match_softmax():
    n = 4000
    ids = draw_many(n)
    freq = torch.bincount(ids, minlength=V).float() / n
    probs = BASE.softmax(0)
    assert (freq - probs).abs().max() < 0.025
    chi2 = float((((freq - probs) * n) ** 2 / (probs * n)).sum())
    assert chi2 < 24.3  # chi-square, 7 dof, p = 0.001


def test_temperature_concentrates():
    n = 2000
    cold = torch.bincount(draw_many(n, temperature=0.3), minlength=V).float() / n
    hot = torch.bincount(draw_many(n, temperature=3.0), minlength=V).float() / n
    assert cold[0] > 0.75 > hot[0]
    expected_cold = (BASE / 0.3).softmax(0)
    assert (cold - expected_cold).abs().max() < 0.04


def test_temperature_scales_reported_logprob():
    out = TorchSampler().sample(BASE[None].clone(), [row(do_sample=True, temperature=0.5)])
    expected = torch.log_softmax(BASE / 0.5, 0)[out.token_ids[0]]
    assert math.isclose(float(out.logprobs[0]), float(expected), rel_tol=1e-5)


def test_top_k_only_picks_top_k():
    ids = draw_many(1000, top_k=2)
    assert set(ids.tolist()) == {0, 1}


def test_top_p_keeps_nucleus():
    probs = BASE.softmax(0)  # ~0.41, 0.25, 0.15, 0.09, ...
    ids = draw_many(1000, top_p=0.7)  # 0.41 + 0.25 < 0.7 -> {0, 1, 2}
    assert float(probs[:2].sum()) < 0.7 < float(probs[:3].sum())
    assert set(ids.tolist()) == {0, 1, 2}
    # renormalised within the nucleus
    freq = torch.bincount(ids, minlength=V).float()[:3] / 1000
    assert (freq - probs[:3] / probs[:3].sum()).abs().max() < 0.05
    # tiny top_p keeps exactly the best token
    assert set(draw_many(200, top_p=0.01).tolist()) == {0}


def test_top_k_and_top_p_combined():
    assert set(draw_many(500, top_k=2, top_p=0.9).tolist()) == {0, 1}


def _hf_typical(logits: torch.Tensor, mass: float) -> set[int]:
    """The kept set per HF TypicalLogitsWarper, computed independently."""
    logp = logits.log_softmax(0)
    ent = -(logp * logp.exp()).sum()
    order = sorted(range(len(logits)), key=lambda i: abs(float(-logp[i] - ent)))
    kept, cum = [], 0.0
    for i in order:
        kept.append(i)
        cum += float(logp[i].exp())
        if cum >= mass:
            break
    return set(kept)


def test_typical_p_keeps_locally_typical_set():
    logits = torch.tensor([1.5, 0.3, 0.2, 0.1, 0.0, -0.1, -0.2, -4.0])
    kept = _hf_typical(logits, 0.5)
    ids = draw_many(1000, logits=logits, typical_p=0.5)
    assert set(ids.tolist()) == kept
    assert 0 not in kept  # the most likely token is atypical here
    masked = P.apply_typical_p(logits[None].clone(), torch.tensor([0.5]))
    assert set(torch.isfinite(masked[0]).nonzero().flatten().tolist()) == kept


def test_repetition_penalty_formula():
    logits = torch.tensor([[2.0, -1.0, 0.5, -0.2, 1.0, 0.0, 3.0, -3.0]])
    prompt, output = (0, 1), (1, 3)  # token 1 twice: penalised once
    out = TorchSampler().sample(logits.clone(), [row(prompt=prompt, output=output, repetition_penalty=2.0)])
    exp = logits.clone()[0]
    for t in (0, 1, 3):
        exp[t] = exp[t] / 2.0 if exp[t] > 0 else exp[t] * 2.0
    assert int(out.token_ids[0]) == 6
    torch.testing.assert_close(out.logprobs[0], torch.log_softmax(exp, 0)[6])
    # penalty pushes the argmax away when the best token was seen
    out = TorchSampler().sample(logits.clone(), [row(prompt=(6,), repetition_penalty=3.0)])
    assert int(out.token_ids[0]) == 0


def test_frequency_and_presence_penalties_formula():
    logits = torch.zeros(1, V)
    prompt, output = (5, 5, 5), (2, 2, 2, 3)  # prompt tokens are not counted
    r = row(prompt=prompt, output=output, frequency_penalty=0.5, presence_penalty=0.25, top_n_tokens=V)
    out = TorchSampler().sample(logits, [r])
    exp = torch.zeros(V)
    exp[2] -= 0.5 * 3 + 0.25
    exp[3] -= 0.5 * 1 + 0.25
    by_id = dict(zip(out.top_token_ids[0].tolist(), out.top_logprobs[0].tolist(), strict=True))
    want = torch.log_softmax(exp, 0)
    for t in range(V):
        assert math.isclose(by_id[t], float(want[t]), abs_tol=1e-6)


def test_penalties_only_touch_their_rows():
    logits = torch.randn(3, V, generator=torch.Generator().manual_seed(1))
    rows = [row(output=(0, 1)), row(output=(0, 1), presence_penalty=2.0), row(output=(0, 1))]
    out = TorchSampler().sample(logits.clone(), rows)
    lsm = torch.log_softmax(logits, 1)
    for i in (0, 2):
        assert math.isclose(float(out.logprobs[i]), float(lsm[i, out.token_ids[i]]), abs_tol=1e-6)


def test_seeded_reproducible_across_batch_compositions():
    g = torch.Generator().manual_seed(2)
    target = torch.randn(1000, generator=g)
    others = torch.randn(4, 1000, generator=g)
    kw = dict(do_sample=True, temperature=0.9, top_k=50, top_p=0.95)
    alone = TorchSampler().sample(target[None].clone(), [row(seed=1234, **kw)]).token_ids[0]
    mixed_rows = [
        row(seed=7, do_sample=True, repetition_penalty=1.3, output=(3, 4)),
        row(seed=8),  # greedy
        row(seed=1234, **kw),
        row(seed=9, do_sample=True, typical_p=0.8),
        row(seed=10, do_sample=True, frequency_penalty=1.0, output=(1,)),
    ]
    batch = torch.cat([others[:2], target[None], others[2:]])
    assert TorchSampler().sample(batch, mixed_rows).token_ids[2] == alone
    # at the front, and the same seed twice in one batch
    batch = torch.stack([target, others[0], target])
    ids = TorchSampler().sample(batch, [row(seed=1234, **kw), row(seed=3), row(seed=1234, **kw)]).token_ids
    assert ids[0] == alone and ids[2] == alone


def test_steps_and_seeds_give_different_noise():
    seeds = torch.tensor([5, 5, 6, P.seed_to_i64(2**64 - 1)])
    steps = torch.tensor([0, 1, 0, 0])
    u = P.hash_uniform(seeds, steps, 4096)
    assert ((u > 0) & (u < 1)).all()
    assert not torch.equal(u[0], u[1]) and not torch.equal(u[0], u[2])
    assert abs(float(u.mean()) - 0.5) < 0.01
    # the step is num_generated: same seed, different step -> a different draw sequence
    flat = torch.zeros(1, 1000)
    draws = {
        int(TorchSampler().sample(flat, [row(seed=3, output=(1,) * k, do_sample=True)]).token_ids[0])
        for k in range(10)
    }
    assert len(draws) > 5


def test_top_n_tokens_uses_max_over_rows():
    logits = torch.randn(2, V, generator=torch.Generator().manual_seed(3))
    out = TorchSampler().sample(logits, [row(top_n_tokens=2), row(top_n_tokens=3, do_sample=True)])
    assert out.top_token_ids.shape == (2, 3) and out.top_logprobs.shape == (2, 3)
    lsm = torch.log_softmax(logits, 1)
    ref_lp, ref_ids = lsm.topk(3, dim=1)
    assert torch.equal(out.top_token_ids, ref_ids)
    torch.testing.assert_close(out.top_logprobs, ref_lp)


def test_non_float32_input_and_mismatch():
    logits = BASE[None].to(torch.float64)
    out = TorchSampler().sample(logits, [row()])
    assert int(out.token_ids[0]) == 0 and out.logprobs.dtype == torch.float32
    with pytest.raises(ValueError):
        TorchSampler().sample(BASE[None], [row(), row()])


def test_top_k_top_p_partial_sort_matches_full_sort():
    logits = torch.randn(4, 300, generator=torch.Generator().manual_seed(4)) * 3
    top_k = torch.tensor([5, 40, 0, 30])
    top_p = torch.tensor([1.0, 0.8, 1.0, 0.5])
    full = P.apply_top_k_top_p(logits.clone(), top_k, top_p)
    part = P.apply_top_k_top_p(logits.clone(), top_k, top_p, max_k=40)
    assert torch.equal(full, part)
    assert torch.equal(full[2], logits[2])  # untouched row
    assert int(torch.isfinite(full[0]).sum()) == 5


def test_equals_the_plainly_written_reference_over_a_random_grid():
    """Every parameter combination, in one batch, against `reference_sample` (one row at a time, float64)."""
    import random

    from tgi.core.testing.reference_sampler import reference_sample, uniform_noise

    rng = random.Random(0)
    rows = []
    for _ in range(300):
        params = dict(
            do_sample=rng.random() < 0.8,
            temperature=rng.choice([1.0, 0.3, 0.7, 1.5]),
            top_k=rng.choice([0, 0, 1, 5, 50]),
            top_p=rng.choice([1.0, 1.0, 0.5, 0.9]),
            typical_p=rng.choice([1.0, 1.0, 0.3, 0.95]),
            repetition_penalty=rng.choice([1.0, 1.3, 0.8]),
            frequency_penalty=rng.choice([0.0, 0.5, -1.0]),
            presence_penalty=rng.choice([0.0, 0.4]),
        )
        history = [rng.randrange(300) for _ in range(rng.randrange(1, 30))]
        prompt = rng.randrange(1, len(history) + 1)
        rows.append(row(seed=rng.getrandbits(64), prompt=history[:prompt], output=history[prompt:], **params))
    logits = torch.randn(len(rows), 300, generator=torch.Generator().manual_seed(1)) * 3
    ours, ref = TorchSampler().sample(logits, rows), reference_sample(logits, rows)
    assert ours.token_ids.tolist() == ref.token_ids
    torch.testing.assert_close(
        ours.logprobs.double(), torch.tensor(ref.logprobs, dtype=torch.float64), atol=1e-5, rtol=1e-5
    )
    assert len(set(ref.token_ids)) > 100  # varied draws, not one token everywhere
    # the noise itself, value for value
    seeds, steps = torch.tensor([P.seed_to_i64(2**64 - 1), 5]), torch.tensor([3, 0])
    u = P.hash_uniform(seeds, steps, 64).double()
    expected = torch.tensor([uniform_noise(2**64 - 1, 3, 64), uniform_noise(5, 0, 64)], dtype=torch.float64)
    assert torch.equal(u, expected)


@pytest.mark.parametrize("kw", [dict(top_k=1), dict(top_p=0.05), dict()], ids=["top_k", "top_p", "plain"])
def test_a_token_of_negligible_probability_is_never_drawn(kw):
    # Seed 576's noise at step 0, over 4096 tokens, once held a uniform of exactly 1.0 at token 3710
    # (24 bits + 0.5 rounded up in float32): its exponential was 0, so the token won every draw, and a
    # token truncated away (-inf - log 0 = NaN) won argmax.
    logits = torch.randn(1, 4096, generator=torch.Generator().manual_seed(5))
    logits[0, 3710] = -100.0
    best = int(logits.argmax())
    token = int(TorchSampler().sample(logits, [row(seed=576, do_sample=True, **kw)]).token_ids[0])
    assert token != 3710
    if kw.get("top_k") == 1:
        assert token == best
