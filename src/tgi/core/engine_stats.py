"""A snapshot of an engine's queues, KV pool and counters, for metrics and `/info` (no torch here)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineStats:
    """A snapshot for metrics and `/info`."""

    num_waiting: int
    num_running: int
    num_batch_tokens: int  # tokens in the last executed step
    num_free_blocks: int
    num_total_blocks: int
    block_size: int
    num_preemptions: int
    num_prefill_tokens: int  # prompt tokens run through the model since start (chunks and recomputation)
    prefix_caching: bool = False  # whether KV blocks of prompts already seen are reused
    # tokens of admitted sequences read from the prefix cache / computed, since start (re-admissions after
    # preemption included)
    num_prefix_cache_hit_tokens: int = 0
    num_prefix_cache_miss_tokens: int = 0
    # speculative decoding: guesses verified and accepted, since start
    num_draft_tokens: int = 0
    num_accepted_draft_tokens: int = 0
    # seconds since start in the runner's steps (`execute`, sampling included) and, of those, in the vision
    # encoder (`StepOutput.encoder_seconds`): the encoder's share of the steps
    step_seconds: float = 0.0
    encoder_seconds: float = 0.0
