"""Atomic images (`RunnerConstraints.atomic_images`: a model whose image tokens attend to each other both ways at
prefill, Gemma 3): no prefill chunk ends inside an image, whether the step's token budget, the KV cache's free
blocks or the end of a cached prefix would cut it; a prompt with an image longer than the longest chunk is
refused (no torch: the scheduler only sees `ImageInput` offsets and sizes)."""

from __future__ import annotations

import pytest
from fake_paged_model import FakePagedModel

from tgi.core.block_manager import BlockManager
from tgi.core.interfaces.types import RunnerConstraints
from tgi.core.request import FinishReason, ImageInput
from tgi.core.sampling_params import SamplingParams
from tgi.core.scheduler import Scheduler
from tgi.core.sequence import Sequence

ATOMIC = RunnerConstraints(atomic_images=True)


def image(offset: int, num_tokens: int, tag: int = 0) -> ImageInput:
    return ImageInput(pixel_values=None, offset=offset, num_tokens=num_tokens, content_hash=bytes([tag]) * 8)


def prefill_chunks(sched: Scheduler, seqs: list[tuple[int, Sequence]], max_steps: int = 500):
    """Drive `sched` to the end; every prefill chunk fed, as (request id, start, length)."""
    bm = sched.block_manager
    model = FakePagedModel(bm.num_blocks, bm.block_size, bm)
    pending = sorted(seqs, key=lambda p: p[0])
    chunks = []
    for step in range(max_steps):
        while pending and pending[0][0] <= step:
            sched.add(pending.pop(0)[1])
        if not pending and not sched.has_unfinished():
            return chunks
        batch = sched.schedule()
        chunks += [(s.request_id, s.start_pos, s.num_tokens) for s in batch.sequences if s.is_prefill]
        if batch.is_empty:
            continue
        for seq in sched.update(batch, model.execute(batch)):
            if seq.num_output_tokens >= seq.params.max_new_tokens:
                sched.finish(seq.request_id, FinishReason.LENGTH)
    raise AssertionError("the workload did not finish")


def splits_an_image(chunk: tuple[str, int, int], images: dict[str, tuple[ImageInput, ...]]) -> bool:
    request_id, start, n = chunk
    return any(im.offset < start + n < im.offset + im.num_tokens for im in images[request_id])


@pytest.mark.parametrize("constraints", [RunnerConstraints(), ATOMIC], ids=["split", "atomic"])
def test_a_chunk_budget_cut_falls_before_the_image(constraints) -> None:
    sched = Scheduler(BlockManager(64, 4), 8, 8, constraints)
    seq = Sequence("a", list(range(1, 21)), SamplingParams(max_new_tokens=1), images=(image(5, 6),))
    chunks = [(start, n) for _, start, n in prefill_chunks(sched, [(0, seq)])]
    if constraints.atomic_images:
        assert chunks == [(0, 5), (5, 8), (13, 7)]
    else:
        assert chunks == [(0, 8), (8, 8), (16, 4)]


def test_an_image_longer_than_a_chunk_is_refused() -> None:
    sched = Scheduler(BlockManager(64, 4), 8, 8, ATOMIC)
    seq = Sequence("a", list(range(1, 21)), SamplingParams(max_new_tokens=1), images=(image(2, 9),))
    with pytest.raises(
        ValueError,
        match="image 0 has 9 image tokens; this model feeds an image in one prefill chunk, and the largest is 8",
    ):
        sched.add(seq)


@pytest.mark.parametrize("constraints", [RunnerConstraints(), ATOMIC], ids=["split", "atomic"])
def test_a_cached_prefix_stops_before_the_image_it_would_end_inside(constraints) -> None:
    sched = Scheduler(BlockManager(64, 4, prefix_caching=True), 8, 64, constraints)
    prompt = [5] * 16
    first = Sequence("a", prompt, SamplingParams(max_new_tokens=1), images=(image(6, 8, 3),))
    again = Sequence("b", prompt, SamplingParams(max_new_tokens=1), images=(image(6, 8, 3),))
    chunks = prefill_chunks(sched, [(0, first), (3, again)])
    # three cached blocks end at 12, inside the image [6, 14); atomic: only the block before it is reused
    assert [c for c in chunks if c[0] == "b"] == (
        [("b", 4, 12)] if constraints.atomic_images else [("b", 12, 4)]
    )


def test_no_chunk_ends_inside_an_image_under_preemption() -> None:
    # 7 blocks of 4 for three 16-token image prompts that decode 10 tokens each: a chunk is cut to the cache's
    # free blocks, and sequences are preempted; no cut falls inside an image, and every request finishes
    sched = Scheduler(BlockManager(7, 4), 8, 12, ATOMIC)
    images = {f"r{i}": (image(3 + i, 7, i),) for i in range(3)}
    seqs = [
        (0, Sequence(rid, [10 + i] * 16, SamplingParams(max_new_tokens=10), images=ims))
        for i, (rid, ims) in enumerate(images.items())
    ]
    chunks = prefill_chunks(sched, seqs)
    assert sched.num_preemptions > 0
    assert not [c for c in chunks if splits_an_image(c, images)]
