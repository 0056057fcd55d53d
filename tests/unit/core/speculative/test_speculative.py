"""Speculative decoding without a model: the n-gram proposer, acceptance, the scheduler's verify rows and
their attention metadata (one decode query per fed token)."""

from __future__ import annotations

import random

import pytest

from tgi.core.block_manager import BlockManager
from tgi.core.interfaces.batch import ScheduledBatch, StepOutput
from tgi.core.models.context import build_attention_metadata
from tgi.core.sampling_params import SamplingParams
from tgi.core.scheduler import Scheduler, accepted_drafts
from tgi.core.sequence import Sequence
from tgi.core.speculative import NgramProposer


def brute_force(tokens: list[int], k: int, max_n: int = 4, min_n: int = 1) -> list[int]:
    """The latest earlier occurrence of the longest trailing n-gram, and what followed it."""
    end = len(tokens)
    for n in range(min(max_n, end - 1), min_n - 1, -1):
        tail = tokens[end - n :]
        for stop in range(end - 1, n - 1, -1):  # an occurrence ending at `stop`, followed by a token
            if tokens[stop - n : stop] == tail:
                return tokens[stop : min(stop + k, end)]
    return []


def test_ngram_proposer_equals_brute_force_as_the_sequence_grows():
    rng = random.Random(0)
    proposer = NgramProposer()
    tokens = [rng.randrange(6) for _ in range(5)]
    for _ in range(300):
        k = rng.randrange(1, 6)
        assert proposer.propose("r", tokens, k) == brute_force(tokens, k)
        tokens += [rng.randrange(6) for _ in range(rng.randrange(1, 4))]  # accepted guesses add several
    proposer.drop("r")
    assert proposer.propose("r", [1, 2, 3, 1, 2], 3) == [3, 1, 2]


def test_acceptance_is_the_leading_run_of_equal_tokens():
    assert accepted_drafts([5, 6, 7], [5, 6, 9, 1]) == 2
    assert accepted_drafts([5, 6, 7], [4, 6, 7, 1]) == 0
    assert accepted_drafts([5, 6, 7], [5, 6, 7, 8]) == 3
    assert accepted_drafts([], [3]) == 0


def _running(scheduler: Scheduler, prompt: list[int], max_new_tokens: int = 20) -> Sequence:
    seq = Sequence("a", prompt, SamplingParams(max_new_tokens=max_new_tokens), seed=1)
    scheduler.add(seq)
    batch = scheduler.schedule()  # the prompt
    scheduler.update(batch, StepOutput(["a"], [prompt[-1] + 1], [0.0]))
    return seq


@pytest.mark.parametrize(("drawn", "accepted"), [([8, 9, 4, 1], 2), ([3, 9, 10, 2], 0), ([8, 9, 10, 11], 3)])
def test_a_verify_row_keeps_the_accepted_guesses_and_their_keys(drawn, accepted):
    bm = BlockManager(16, 4)
    scheduler = Scheduler(bm, 4, 64)
    seq = _running(scheduler, [1, 2, 3, 4, 5, 6])
    assert seq.token_ids[-1] == 7 and seq.num_computed_tokens == 6
    seq.draft_token_ids = [8, 9, 10]
    batch = scheduler.schedule()
    [row] = batch.sequences
    assert not row.is_prefill and row.token_ids == [7, 8, 9, 10] and row.num_draft_tokens == 3
    assert [len(r.all_token_ids) for r in row.draft_rows()] == [7, 8, 9, 10]
    meta = build_attention_metadata(batch.sequences, bm.block_size)
    assert meta.num_decode_tokens == 4 and meta.decode_seq_lens_host == [7, 8, 9, 10]
    scheduler.update(batch, StepOutput(["a"] * 4, drawn, [0.0] * 4))
    # position j drew the token after the guesses before it: equal guesses are kept, then one more draw
    assert seq.token_ids[7:] == drawn[: accepted + 1] and seq.num_new_tokens == accepted + 1
    assert seq.num_computed_tokens == 7 + accepted  # the last token's key and the kept guesses'
    assert seq.is_decode and seq.draft_token_ids == []
    assert scheduler.num_draft_tokens == 3 and scheduler.num_accepted_draft_tokens == accepted
    bm.check_invariants()


def test_guesses_never_take_the_last_free_blocks():
    bm = BlockManager(3, 4)  # 12 slots: the 6-token prompt and its next token fill 2 blocks
    scheduler = Scheduler(bm, 4, 64)
    seq = _running(scheduler, [1, 2, 3, 4, 5, 6], max_new_tokens=6)
    seq.draft_token_ids = [8, 9, 10, 11, 12]
    [row] = scheduler.schedule().sequences
    # one block is free and one sequence runs: the guesses stay within the sequence's own blocks
    assert row.num_draft_tokens == 1 and row.token_ids == [7, 8]


def test_a_runner_must_return_a_token_per_position():
    scheduler = Scheduler(BlockManager(16, 4), 4, 64)
    seq = _running(scheduler, [1, 2, 3])
    seq.draft_token_ids = [5, 6]
    batch: ScheduledBatch = scheduler.schedule()
    with pytest.raises(Exception, match="3 sampled positions"):
        scheduler.update(batch, StepOutput(["a"], [5], [0.0]))


def test_a_draft_model_needs_guesses_to_make():
    from tgi.core.config import ConfigError, EngineConfig
    from tgi.core.engine_startup import load_draft_runner

    with pytest.raises(ConfigError, match="needs --speculate"):
        load_draft_runner(None, EngineConfig(speculative_model="some/draft"), None, print)


def test_failing_guesses_back_off():
    scheduler = Scheduler(BlockManager(64, 4), 4, 64)
    seq = _running(scheduler, [1, 2, 3], max_new_tokens=40)
    waits = []
    for drawn_first in (9, 9, 9, 5):  # guesses [5, 6]: three misses, then a hit
        seq.draft_token_ids = [5, 6]
        batch = scheduler.schedule()
        assert batch.sequences[0].num_draft_tokens == 2
        scheduler.update(batch, StepOutput(["a"] * 3, [drawn_first, 1, 1], [0.0] * 3))
        waits.append((seq.spec_backoff, seq.spec_wait))
    assert waits == [(1, 1), (2, 2), (4, 4), (0, 0)]


def test_info_names_the_proposer():
    from types import SimpleNamespace

    from fastapi.testclient import TestClient

    from tgi.core.async_engine import AsyncEngine
    from tgi.server.app import create_app
    from tgi.server.service.settings import ServerSettings

    def engine(proposer):
        return AsyncEngine(SimpleNamespace(proposer=proposer), model_id="m", backend_name="cpu")

    assert engine(NgramProposer()).speculation == "ngram" and engine(None).speculation is None
    from fake_engine import FakeEngine

    with TestClient(create_app(FakeEngine(), ServerSettings())) as c:
        info = c.get("/info").json()
        assert info["speculate"] == 0 and info["speculation"] is None


def test_masks_follow_sampled_positions_past_guessing_rows():
    from types import SimpleNamespace

    import numpy as np

    from tgi.core.interfaces.batch import TokenMasks

    masks = TokenMasks(rows=(1, 3), bitmask=np.zeros((2, 1), dtype=np.int32), vocab_size=32)
    plain = [SimpleNamespace(num_draft_tokens=0)] * 4
    assert masks.at_positions(plain) is masks
    guessing = [SimpleNamespace(num_draft_tokens=k) for k in (2, 0, 3, 0)]  # rows 0-2, 3, 4-7, 8
    assert masks.at_positions(guessing).rows == (3, 8)


def _two_decoding(drafts_of_a: list[int]) -> tuple[Scheduler, ScheduledBatch, Sequence, Sequence]:
    scheduler = Scheduler(BlockManager(32, 4), 4, 64)
    a = Sequence("a", [1, 2, 3], SamplingParams(max_new_tokens=20), seed=1)
    b = Sequence("b", [4, 5], SamplingParams(max_new_tokens=20), seed=2)
    scheduler.add(a)
    scheduler.add(b)
    scheduler.update(scheduler.schedule(), StepOutput(["a", "b"], [6, 7], [0.0] * 2))
    a.draft_token_ids = list(drafts_of_a)
    return scheduler, scheduler.schedule(), a, b


def test_update_tells_each_sequence_the_output_rows_of_its_new_tokens():
    scheduler, batch, a, b = _two_decoding([8, 9, 10])
    assert [(s.request_id, s.num_tokens) for s in batch.sequences] == [("a", 4), ("b", 1)]
    scheduler.update(batch, StepOutput(["a"] * 4 + ["b"], [8, 9, 4, 1, 11], [0.0] * 5))
    assert a.new_token_rows == range(0, 3) and a.num_new_tokens == 3  # two guesses kept, one more drawn
    assert b.new_token_rows == range(4, 5) and b.token_ids[-1] == 11


def test_rows_of_one_request_apart_are_refused():
    from tgi.core.scheduler import SchedulerError

    scheduler, batch, _, _ = _two_decoding([8])
    with pytest.raises(SchedulerError, match="rows apart"):
        scheduler.update(batch, StepOutput(["a", "b", "a"], [8, 11, 1], [0.0] * 3))
