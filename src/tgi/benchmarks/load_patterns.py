"""How the serving benchmark sends a level's requests: a closed loop of C clients, or Poisson arrivals at a
rate (open loop). Both take a `requester` (one prompt -> one awaited `RequestResult`) and return the results
in prompt order with the level's wall time."""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable, Sequence

from tgi.benchmarks.client import RequestResult
from tgi.benchmarks.prompts import BenchPrompt


async def run_closed_loop(
    requester: Callable[[BenchPrompt], object], prompts: Sequence[BenchPrompt], concurrency: int
) -> tuple[list[RequestResult], float]:
    """`concurrency` clients, each sending its next request when its last one ends, until `prompts` are
    used up. Returns the results (in prompt order) and the wall time."""
    results: list[RequestResult | None] = [None] * len(prompts)
    next_index = 0

    async def client() -> None:
        nonlocal next_index
        while next_index < len(prompts):
            i = next_index
            next_index += 1
            results[i] = await requester(prompts[i])

    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(min(concurrency, len(prompts)))))
    return results, time.perf_counter() - t0  # type: ignore[return-value]


async def run_poisson(
    requester: Callable[[BenchPrompt], object],
    prompts: Sequence[BenchPrompt],
    rate: float,
    seed: int = 0,
    max_concurrency: int | None = None,
) -> tuple[list[RequestResult], float]:
    """Open loop: requests arrive as a Poisson process of `rate` per second (inf: all at once), optionally
    at most `max_concurrency` in flight. Returns the results (in prompt order) and the wall time."""
    rng = random.Random(seed)
    limit = asyncio.Semaphore(max_concurrency) if max_concurrency else None

    async def one(prompt: BenchPrompt) -> RequestResult:
        if limit is None:
            return await requester(prompt)
        async with limit:
            return await requester(prompt)

    t0 = time.perf_counter()
    tasks = []
    arrival = 0.0
    for prompt in prompts:
        if not math.isinf(rate):
            arrival += rng.expovariate(rate)
            delay = t0 + arrival - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
        tasks.append(asyncio.ensure_future(one(prompt)))
    results = await asyncio.gather(*tasks)
    return list(results), time.perf_counter() - t0
