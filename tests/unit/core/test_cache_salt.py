"""The prefix cache kept apart by `cache_salt` and tenant (`tgi.core.block_hash.request_cache_key`): two
salts, or two tenants, never share a block; equal ones do; an unsalted request shares only with unsalted
ones. In the block manager, through the scheduler (no torch), and through the engine on a tiny model."""

from __future__ import annotations

import dataclasses

import pytest
from fake_paged_model import FakePagedModel

from tgi.core.block_hash import request_cache_key
from tgi.core.block_manager import NO_PREFIX, BlockManager
from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.interfaces.types import RunnerConstraints
from tgi.core.request import EngineRequest, FinishReason
from tgi.core.sampling_params import SamplingParams
from tgi.core.scheduler import Scheduler
from tgi.core.sequence import Sequence
from tgi.core.testing.model import write_tiny_llama

BS = 4
PROMPT = list(range(100, 117))  # 4 full blocks and 1 token


def _computed(bm: BlockManager, rid: str, key: bytes) -> Sequence:
    seq = Sequence(rid, PROMPT, cache_key=key)
    bm.allocate(seq, len(PROMPT))
    seq.num_computed_tokens = len(PROMPT)
    bm.cache_computed(seq)
    return seq


def test_salts_and_tenants_partition_the_block_manager() -> None:
    bm = BlockManager(32, BS, prefix_caching=True, namespace=b"m")
    _computed(bm, "a", request_cache_key(salt="alice"))
    hit = bm.match_prefix(Sequence("b", PROMPT, cache_key=request_cache_key(salt="alice")))
    assert hit.num_tokens == 16  # the same salt: every full block but the one holding the last token
    for key in (
        request_cache_key(salt="bob"),  # another salt
        request_cache_key(),  # no salt
        request_cache_key(tenant="alice"),  # a tenant named like the salt is no salt
        request_cache_key(tenant="t1", salt="alice"),  # the salt within a tenant
    ):
        assert bm.match_prefix(Sequence("c", PROMPT, cache_key=key)) is NO_PREFIX, key
    _computed(bm, "d", request_cache_key())  # unsalted shares with unsalted only
    assert bm.match_prefix(Sequence("e", PROMPT)).num_tokens == 16
    assert bm.match_prefix(Sequence("f", PROMPT, cache_key=request_cache_key(salt="x"))) is NO_PREFIX
    bm.check_invariants()


def test_the_key_encoding_cannot_be_spelled_by_another_pair() -> None:
    keys = {
        request_cache_key(),
        request_cache_key(b"lora:1:a"),
        request_cache_key(tenant="a"),
        request_cache_key(salt="a"),
        request_cache_key(tenant="a", salt="b"),
        request_cache_key(tenant="ab"),
        request_cache_key(tenant="a:", salt="b"),
        request_cache_key(b"lora:1:a", tenant="a"),
    }
    assert len(keys) == 8
    assert request_cache_key(b"lora:1:a") == b"lora:1:a"  # unsalted, untenanted: the adapter's key as before
    assert request_cache_key(tenant="t", salt="s") == request_cache_key(tenant="t", salt="s")


def _drive(requests: list[tuple[str, bytes]]) -> dict[str, int]:
    """Each (id, cache key) in turn through a scheduler over the fake paged model, one after the other
    finishing; the prompt tokens each read from the cache."""
    bm = BlockManager(64, BS, prefix_caching=True)
    sched = Scheduler(bm, 8, 64, RunnerConstraints())
    model = FakePagedModel(bm.num_blocks, BS, bm)
    cached: dict[str, int] = {}
    for rid, key in requests:
        seq = Sequence(rid, PROMPT, SamplingParams(max_new_tokens=2), seed=1, cache_key=key)
        sched.add(seq)
        while sched.has_unfinished():
            batch = sched.schedule()
            for done in sched.update(batch, model.execute(batch)):
                if done.num_output_tokens >= 2:
                    sched.finish(done.request_id, FinishReason.LENGTH)
        cached[rid] = seq.num_cached_prompt_tokens
    bm.check_invariants()
    return cached


def test_the_scheduler_reads_only_blocks_of_the_same_salt() -> None:
    cached = _drive(
        [
            ("a1", request_cache_key(salt="a")),
            ("b1", request_cache_key(salt="b")),
            ("a2", request_cache_key(salt="a")),
            ("plain1", b""),
            ("plain2", b""),
            ("t1", request_cache_key(tenant="t1")),
            ("t2", request_cache_key(tenant="t2")),
            ("t1-again", request_cache_key(tenant="t1")),
        ]
    )
    assert cached == {
        "a1": 0, "b1": 0, "a2": 16, "plain1": 0, "plain2": 16, "t1": 0, "t2": 0, "t1-again": 16
    }  # fmt: skip


def test_an_empty_salt_or_tenant_is_refused() -> None:
    with pytest.raises(ValueError, match="non-empty"):
        EngineRequest((1, 2), SamplingParams(), cache_salt="")
    with pytest.raises(ValueError, match="non-empty"):
        EngineRequest((1, 2), SamplingParams(), tenant="")


def test_the_engine_caches_by_salt_and_tenant(tmp_path) -> None:
    engine = LLMEngine.from_config(
        EngineConfig(model_id=str(write_tiny_llama(tmp_path)), backend="cpu", dtype="float32",
                     max_total_tokens=128, max_batch_total_tokens=512, max_batch_prefill_tokens=128)
    )  # fmt: skip
    block = engine.block_manager.block_size
    prompt = list(range(5, 5 + 2 * block + 3))

    def cached(**given) -> int:
        request = dataclasses.replace(engine.validate(prompt, SamplingParams(max_new_tokens=1)), **given)
        rid = engine.add_validated_request(request)
        events = []
        while engine.has_unfinished():
            events += [e for e in engine.step() if e.request_id == rid]
        return events[-1].num_cached_tokens

    assert cached(cache_salt="s1") == 0
    assert cached(cache_salt="s2") == 0
    assert cached() == 0
    assert cached(cache_salt="s1") == 2 * block
    assert cached(tenant="t1", cache_salt="s1") == 0
    assert cached(tenant="t2", cache_salt="s1") == 0
    assert cached(tenant="t1", cache_salt="s1") == 2 * block
    assert cached() == 2 * block
