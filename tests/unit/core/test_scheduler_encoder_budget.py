"""The scheduler's encoder budget (`max_encoder_tokens_per_step`): the placeholder tokens of the images a step
starts encoding stay within it, a chunk is cut before the image that would pass it, and decodes keep running
through a burst of image requests (no torch: the scheduler only sees `ImageInput` offsets and sizes).

`EncoderModel` encodes as the torch runner's `ImageEmbeddings` does (an image when a chunk feeds one of its
placeholders and its output is not kept; kept until its last placeholder is fed or the request is freed), so
what it counts per step is what the vision tower would run."""

from __future__ import annotations

import pytest
from fake_paged_model import FakePagedModel

from tgi.core.block_manager import BlockManager
from tgi.core.config import ConfigError
from tgi.core.interfaces.batch import ScheduledBatch
from tgi.core.request import FinishReason, ImageInput
from tgi.core.sampling_params import SamplingParams
from tgi.core.scheduler import Scheduler
from tgi.core.sequence import Sequence


def image(offset: int, num_tokens: int, tag: int = 0) -> ImageInput:
    return ImageInput(pixel_values=None, offset=offset, num_tokens=num_tokens, content_hash=bytes([tag]) * 8)


class EncoderModel:
    """Placeholder tokens encoded per step, the runner's way (module docstring)."""

    def __init__(self) -> None:
        self.kept: dict[str, set[int]] = {}

    def encode(self, batch: ScheduledBatch) -> int:
        for request_id in batch.freed_request_ids:
            self.kept.pop(request_id, None)
        encoded = 0
        for s in batch.sequences:
            first, last = s.start_pos, s.start_pos + len(s.token_ids)
            kept = self.kept.setdefault(s.request_id, set())
            for index, im in enumerate(s.images):
                if max(first, im.offset) < min(last, im.offset + im.num_tokens) and index not in kept:
                    kept.add(index)
                    encoded += im.num_tokens
            if s.images and last >= max(im.offset + im.num_tokens for im in s.images):
                self.kept.pop(s.request_id, None)
        return encoded


def run_steps(sched: Scheduler, seqs: list[tuple[int, Sequence]], max_steps: int = 500):
    """Drive `sched` to the end; per step: (batch, tokens encoded, ids that were decoding before it)."""
    bm = sched.block_manager
    model, encoder = FakePagedModel(bm.num_blocks, bm.block_size, bm), EncoderModel()
    pending = sorted(seqs, key=lambda p: p[0])
    steps = []
    for step in range(max_steps):
        while pending and pending[0][0] <= step:
            sched.add(pending.pop(0)[1])
        if not pending and not sched.has_unfinished():
            return steps
        decoding = {s.request_id for s in sched.running if s.is_decode}
        batch = sched.schedule()
        steps.append((batch, encoder.encode(batch), decoding))
        if batch.is_empty:
            continue
        for seq in sched.update(batch, model.execute(batch)):
            if seq.num_output_tokens >= seq.params.max_new_tokens:
                sched.finish(seq.request_id, FinishReason.LENGTH)
    raise AssertionError("the workload did not finish")


def test_a_burst_of_images_stays_within_the_budget_and_decodes_run_every_step() -> None:
    sched = Scheduler(BlockManager(256, 4), 16, 64, max_encoder_tokens_per_step=16)
    texts = [(0, Sequence(f"t{i}", [3 + i, 4, 5], SamplingParams(max_new_tokens=40))) for i in range(2)]
    burst = [
        (2, Sequence(f"v{i}", [7 + i] * 30, SamplingParams(max_new_tokens=3), images=(image(2, 8, i), image(14, 8, i))))
        for i in range(6)
    ]  # fmt: skip
    steps = run_steps(sched, texts + burst)
    assert max(encoded for _, encoded, _ in steps) == 16  # two images a step at most, and it gets there
    assert sum(encoded for _, encoded, _ in steps) == 6 * 16  # each image encoded once
    for batch, _, decoding in steps:
        decoded = {s.request_id for s in batch.sequences if not s.is_prefill}
        assert decoding <= decoded  # nothing that was decoding waited for the images
    assert sched.num_preemptions == 0


def test_a_chunk_is_cut_before_the_image_past_the_budget() -> None:
    sched = Scheduler(BlockManager(64, 4), 8, 64, max_encoder_tokens_per_step=8)
    seq = Sequence(
        "a", list(range(1, 33)), SamplingParams(max_new_tokens=1), images=(image(5, 8), image(20, 8))
    )
    steps = run_steps(sched, [(0, seq)])
    chunks = [(s.start_pos, s.num_tokens) for b, _, _ in steps for s in b.sequences if s.is_prefill]
    assert chunks == [(0, 20), (20, 12)]
    assert [encoded for _, encoded, _ in steps if encoded] == [8, 8]


def test_an_image_of_the_whole_budget_waits_for_a_step_of_its_own() -> None:
    sched = Scheduler(BlockManager(64, 4), 8, 64, max_encoder_tokens_per_step=8)
    a = Sequence("a", [1] * 12, SamplingParams(max_new_tokens=2), images=(image(0, 8, 1),))
    b = Sequence("b", [2] * 12, SamplingParams(max_new_tokens=2), images=(image(2, 8, 2),))
    steps = run_steps(sched, [(0, a), (0, b)])
    first = [(s.request_id, s.start_pos, s.num_tokens) for s in steps[0][0].sequences]
    assert first == [("a", 0, 12), ("b", 0, 2)]  # b's text before its image, then b waits
    second = [(s.request_id, s.start_pos, s.num_tokens) for s in steps[1][0].sequences]
    assert second == [("b", 2, 10), ("a", 12, 1)]  # prefill chunks first, then decodes
    assert [encoded for _, encoded, _ in steps] == [8, 8, 0]


def test_an_admission_from_a_cached_prefix_inside_an_image_counts_the_image() -> None:
    sched = Scheduler(BlockManager(64, 4, prefix_caching=True), 8, 64, max_encoder_tokens_per_step=8)
    prompt = [5] * 16
    first = Sequence("a", prompt, SamplingParams(max_new_tokens=1), images=(image(6, 8, 3),))
    # the same prompt again starts from cached blocks that end inside the image: it is encoded again,
    # so the other image request of that step waits
    again = Sequence("b", prompt, SamplingParams(max_new_tokens=1), images=(image(6, 8, 3),))
    other = Sequence("c", [9] * 16, SamplingParams(max_new_tokens=1), images=(image(0, 8, 4),))
    steps = run_steps(sched, [(0, first), (3, again), (3, other)])
    batch, encoded, _ = next(step for step in steps if any(s.request_id == "b" for s in step[0].sequences))
    assert [(s.request_id, s.start_pos) for s in batch.sequences] == [("b", 12)]  # 12: inside the image
    assert encoded == 8
    assert sum(encoded for _, encoded, _ in steps) == 3 * 8


def test_the_budget_must_be_positive() -> None:
    with pytest.raises(ConfigError, match="max_encoder_tokens_per_step"):
        Scheduler(BlockManager(8, 4), 4, 16, max_encoder_tokens_per_step=0)
