"""The `AsyncEngine` under failures: a failed step fails only its own requests, a failing abort does not kill
the engine thread, and a dead engine says so (and calls `on_death`, which stops a server)."""

from __future__ import annotations

import asyncio
import time

import pytest

from tgi.core.async_engine import AsyncEngine
from tgi.core.request import EngineError, FinishReason
from tgi.core.sampling_params import SamplingParams

pytestmark = pytest.mark.slow


async def _wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.02)


async def _collect(stream) -> list:
    return [event async for event in stream]


async def test_a_failed_step_fails_only_its_requests(make_engine, prompts):
    llm = make_engine(max_num_seqs=1)  # one sequence per step: the second request waits in the queue
    total = llm.stats().num_total_blocks
    execute = llm.runner.execute
    poisoned = {"id": None}

    def failing_execute(batch):
        if any(s.request_id == poisoned["id"] for s in batch.sequences):
            raise RuntimeError("device fault: secret detail")
        return execute(batch)

    llm.runner.execute = failing_execute
    engine = AsyncEngine(llm)
    await engine.start()
    try:
        params = SamplingParams(max_new_tokens=6, ignore_eos=True)
        poisoned["id"] = "bad"
        bad = engine.stream(prompts["story"], params, request_id="bad")
        good = engine.stream(prompts["short"], params, request_id="good")
        with pytest.raises(EngineError) as failure:
            await _collect(bad)
        assert "secret" not in str(failure.value) and "server log" in str(failure.value)
        events = await _collect(good)
        assert len(events) == 6 and events[-1].finish_reason == FinishReason.LENGTH
        assert engine.healthy
        # and the engine goes on serving new requests
        assert len(await _collect(engine.stream(prompts["short"], params))) == 6
        await _wait_for(lambda: llm.stats().num_free_blocks == total and not llm.has_unfinished())
    finally:
        llm.runner.execute = execute
        await engine.shutdown()


async def test_a_failing_abort_does_not_kill_the_engine(make_engine, prompts):
    llm = make_engine()
    abort = llm.abort
    calls = {"n": 0}

    def failing_abort(request_id):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("abort failed")
        return abort(request_id)

    llm.abort = failing_abort
    engine = AsyncEngine(llm)
    await engine.start()
    try:
        stream = engine.stream(prompts["long"], SamplingParams(max_new_tokens=200, ignore_eos=True))
        await anext(stream)
        await stream.aclose()  # queues the abort that fails
        await _wait_for(lambda: calls["n"] >= 1)
        events = await _collect(engine.stream(prompts["short"], SamplingParams(max_new_tokens=4)))
        assert events[-1].finish_reason is not None
        assert engine.healthy and engine.error is None
    finally:
        llm.abort = abort
        await engine.shutdown(cancel_inflight=True)


async def test_a_dead_engine_fails_its_streams_and_calls_on_death(make_engine, prompts):
    llm = make_engine()
    schedule = llm.scheduler.schedule
    deaths = []

    def broken_schedule():
        raise RuntimeError("scheduler invariant broken: secret detail")

    engine = AsyncEngine(llm)
    engine.on_death = deaths.append
    await engine.start()
    try:
        llm.scheduler.schedule = broken_schedule
        with pytest.raises(EngineError, match=r"the engine died: RuntimeError \(see the server log\)"):
            await _collect(engine.stream(prompts["short"], SamplingParams(max_new_tokens=4)))
        await _wait_for(lambda: bool(deaths))
        assert isinstance(deaths[0], RuntimeError) and engine.error is deaths[0] and not engine.healthy
        with pytest.raises(EngineError):
            engine.stream(prompts["short"], SamplingParams(max_new_tokens=4))
    finally:
        llm.scheduler.schedule = schedule
        await engine.shutdown(cancel_inflight=True)
        llm.abort_all()
