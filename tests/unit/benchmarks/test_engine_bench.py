"""The engine micro-benchmark (`tgi.benchmarks.engine_bench`): its step accounting on a fake engine whose
steps are known in advance (prefill in one or more steps, then one token per request per step), the engine
config that holds its largest point, and its table."""

from __future__ import annotations

import random
import time
from types import SimpleNamespace

import pytest

from tgi.benchmarks import engine_bench


class _FakeEngine:
    """Prefill in one step (every request's first token), then one token per request per step."""

    def __init__(self, steps_per_prefill: int = 1) -> None:
        self.model_info = SimpleNamespace(vocab_size=1000)
        self.runner = SimpleNamespace(execute=lambda batch: time.sleep(0.001))
        self.requests: dict[str, list] = {}
        self.steps_per_prefill = steps_per_prefill
        self.prefill_left = 0

    def add_request(self, ids, params):
        rid = f"r{len(self.requests)}"
        self.requests[rid] = [params.max_new_tokens, 0]
        self.prefill_left = self.steps_per_prefill
        return rid

    def has_unfinished(self):
        return any(n > done for n, done in self.requests.values())

    def step(self):
        self.runner.execute(None)
        if self.prefill_left > 1:
            self.prefill_left -= 1
            return []
        self.prefill_left = 0
        events = []
        for rid, state in self.requests.items():
            if state[1] < state[0]:
                events.append(SimpleNamespace(request_id=rid, index=state[1]))
                state[1] += 1
        return events


@pytest.mark.parametrize("prefill_steps", [1, 2])
def test_engine_bench_splits_prefill_and_decode(prefill_steps):
    eng = _FakeEngine(prefill_steps)
    times = engine_bench.run_point(eng, batch_size=3, seq_len=8, decode_length=4, rng=random.Random(0))
    assert times.prefill_steps == prefill_steps
    assert len(times.decode_steps) == 4 and times.decode_tokens == 12
    assert 0 < times.prefill_model <= times.prefill and all(m > 0 for m in times.decode_model)
    row = engine_bench.summarize_point(3, 8, 4, [times])
    assert row["decode_tok_s"] == pytest.approx(12 / sum(times.decode_steps))
    assert row["prefill_tok_s"] == pytest.approx(24 / times.prefill)
    assert 0 < row["decode_model_share"] <= 1
    assert "decode tok/s" in engine_bench.format_table([row])


def test_engine_config_holds_the_largest_point():
    config = engine_bench.engine_config_for([1, 8, 32], [128, 512], 32)
    assert config.max_num_seqs == 32 and config.max_batch_prefill_tokens == 32 * 512
    assert config.max_total_tokens == 512 + 33
    assert config.max_batch_total_tokens >= 32 * (512 + 33)


def test_engine_bench_table_names_each_backend():
    """`--backend cpu,tpu` runs one backend after another: each row says whose it is."""
    times = engine_bench.run_point(
        _FakeEngine(), batch_size=2, seq_len=4, decode_length=2, rng=random.Random(0)
    )
    rows = [{**engine_bench.summarize_point(2, 4, 2, [times]), "backend": name} for name in ("cpu", "tpu")]
    lines = engine_bench.format_table(rows).splitlines()
    assert lines[0].split()[0] == "backend" and [ln.split()[0] for ln in lines[2:]] == ["cpu", "tpu"]
    one = {k: v for k, v in rows[0].items() if k != "backend"}  # one backend: no such column
    assert "backend" not in engine_bench.format_table([one])
