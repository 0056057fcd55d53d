"""How many tokens of a sequence one step feeds, and from where (no torch here): the scheduler's chunking.

A chunk is capped by the step's token budget left and by the longest prefill chunk the runner takes (its
largest prefill bucket: it pads up to a bucket). Padded prefill (`RunnerConstraints.max_padded_prefill_tokens`,
e.g. Gaudi's `[B, L]` rows): a prefill chunk is cut, or waits, so that the step's padded rows x padded
longest chunk stays within it; the longest chunk that fits alone is the cap, so a step's first prefill
always gets one. A runner without chunked prefill takes the rest of a sequence whole or waits, and a
recomputation (after preemption) that does not fit one prefill is never chosen. A recomputation that
reaches prompt positions whose logprobs were already returned stops at the first one not yet reported.

Encoder budget (`max_encoder_tokens`, vLLM's encoder cache budget): the placeholder tokens of the images a
step starts encoding are bounded. A chunk starts an image when it feeds one of its placeholders and the image
was not fed before since the sequence was (re)admitted: its first placeholder lies in the chunk, or, on the
admission chunk, any of them does (a cached prefix may end inside an image; a recomputation encodes again).
A chunk that would start an image beyond the step's budget left is cut before that image's placeholders
(or waits), so a burst of images cannot stall the decodes of a step; one image alone always fits, since a
request with an image larger than the budget is refused at validation.

Atomic images (`RunnerConstraints.atomic_images`, a model whose image tokens attend to each other both ways):
a chunk that would end inside an image is cut before it (or waits, when the image is its first token), and
the cached prefix a sequence starts from stops before an image it would end inside; a prompt with an image
longer than the longest chunk is refused.

Prefix caching: a sequence admitted from the waiting queue starts after the longest chain of cached blocks
that starts its tokens (`cached_prefix`), less the prompt positions whose logprobs are still owed.
"""

from __future__ import annotations

from dataclasses import dataclass

from tgi.core.block_manager import NO_PREFIX, BlockManager, CachedPrefix
from tgi.core.config import ConfigError
from tgi.core.interfaces.types import RunnerConstraints
from tgi.core.sequence import Sequence
from tgi.core.validation import check_atomic_images


@dataclass(frozen=True)
class EncoderCut:
    """A prefill chunk's length within the step's encoder budget, and the placeholder tokens of the images
    it starts encoding."""

    num_tokens: int
    encoder_tokens: int


class ChunkPolicy:
    """The chunking rules of one scheduler (module docstring): `max_chunk_tokens` is the longest chunk a
    step may feed one sequence; `ConfigError` when the runner's padded prefill bound holds no step."""

    def __init__(
        self,
        block_manager: BlockManager,
        max_batch_tokens: int,
        constraints: RunnerConstraints,
        max_encoder_tokens: int | None = None,
    ) -> None:
        c = self.constraints = constraints
        if max_encoder_tokens is not None and max_encoder_tokens < 1:
            raise ConfigError("max_encoder_tokens_per_step must be >= 1")
        self.block_manager = block_manager
        self.max_encoder_tokens = max_encoder_tokens  # None: unbounded
        self.max_chunk_tokens = min(max_batch_tokens, max(c.prefill_buckets or (max_batch_tokens,)))
        if c.max_padded_prefill_tokens is not None:
            if not (alone := c.prefill_room(0, 0)):
                raise ConfigError(
                    f"the smallest padded prefill step exceeds max_padded_prefill_tokens "
                    f"{c.max_padded_prefill_tokens} (prefill batch buckets {c.prefill_batch_buckets}, "
                    f"prefill buckets {c.prefill_buckets})"
                )
            self.max_chunk_tokens = min(self.max_chunk_tokens, alone)

    @property
    def atomic_image_limit(self) -> int | None:
        """The most placeholder tokens an image may have where images are atomic (the longest chunk); None
        where images may be split across chunks."""
        return self.max_chunk_tokens if self.constraints.atomic_images else None

    def check_admissible(self, seq: Sequence) -> None:
        """`ValueError` for a sequence that could never run: more KV blocks at its peak than the cache has
        (the last sampled token is never fed), or a prompt longer than one prefill where the runner cannot
        chunk prefills."""
        peak = self.block_manager.blocks_needed(seq.num_prompt_tokens + seq.params.max_new_tokens - 1)
        if peak > self.block_manager.num_blocks:
            raise ValueError(
                f"{seq.request_id}: prompt + max_new_tokens needs {peak} KV blocks, the cache has "
                f"{self.block_manager.num_blocks}"
            )
        check_atomic_images(seq.images, self.atomic_image_limit)
        if not self.constraints.chunked_prefill and seq.num_prompt_tokens > self.max_chunk_tokens:
            raise ValueError(
                f"{seq.request_id}: a {seq.num_prompt_tokens}-token prompt exceeds the largest prefill "
                f"({self.max_chunk_tokens} tokens) and this runner cannot chunk prefills"
            )

    def chunk_len(self, seq: Sequence, budget: int, start: int | None = None) -> int:
        """Tokens of `seq` to feed this step within `budget`, from position `start` (default: its
        computed tokens); 0 when it must wait for a step with room."""
        start = seq.num_computed_tokens if start is None else start
        remaining = seq.num_tokens - start
        n = min(remaining, budget, self.max_chunk_tokens)
        upto = seq.prompt_logprobs_upto
        if seq.want_prompt_logprobs and start < upto < seq.num_prompt_tokens:
            n = min(n, upto - start)
        if n < remaining and not self.constraints.chunked_prefill:
            return 0
        return self.image_cut(seq, start, n)

    def image_cut(self, seq: Sequence, start: int, n: int) -> int:
        """The chunk `start` .. `start + n - 1` cut before an image it would end inside, where images are
        atomic (module docstring); `n` otherwise."""
        return self.image_boundary(seq, start + n, start) - start

    def image_boundary(self, seq: Sequence, end: int, floor: int = 0) -> int:
        """`end`, or, where images are atomic and `end` falls inside an image, that image's first position
        (never below `floor`)."""
        if self.constraints.atomic_images:
            for image in seq.images:
                if image.offset < end < image.offset + image.num_tokens:
                    return max(floor, image.offset)
        return end

    def encoder_cut(
        self, seq: Sequence, start: int, n: int, encoder_budget: int, admitting: bool
    ) -> EncoderCut:
        """The chunk `start` .. `start + n - 1` of `seq`, cut before the first image it would start beyond
        `encoder_budget` (placeholder tokens the step may still start encoding); `admitting`: the chunk is
        the first since the sequence was (re)admitted, so every image it touches is encoded (module
        docstring). Without chunked prefill a cut chunk waits (length 0)."""
        end, used = start + n, 0
        for image in seq.images:
            image_end = image.offset + image.num_tokens
            if image.offset >= end:
                break
            if image_end <= start or (image.offset < start and not admitting):
                continue  # fed before this chunk, or encoded by an earlier chunk
            if used + image.num_tokens > encoder_budget:
                cut = max(0, image.offset - start)
                if cut < n and not self.constraints.chunked_prefill:
                    cut = 0
                return EncoderCut(cut, used)
            used += image.num_tokens
        return EncoderCut(n, used)

    def recomputable(self, seq: Sequence) -> bool:
        """Whether `seq` may be preempted: without chunked prefill its recomputation must fit one prefill."""
        return self.constraints.chunked_prefill or seq.num_tokens <= self.max_chunk_tokens

    def prefill_budget(self, budget: int, prefills: list[tuple[Sequence, int]]) -> int:
        """Tokens one more prefill chunk may have this step, after `prefills` (sequence, chunk length):
        `budget`, capped by the padded prefill area's room (`RunnerConstraints.prefill_room`) where the
        runner bounds it (0: the chunk waits)."""
        room = self.constraints.prefill_room(len(prefills), max((n for _, n in prefills), default=0))
        return budget if room is None else min(budget, room)

    def cached_prefix(self, seq: Sequence) -> CachedPrefix:
        """The cached blocks `seq` may start from. Prompt positions whose logprobs are still owed are
        computed, not read from the cache (their logits are needed). `NO_PREFIX` for a runner that cannot
        start a prefill mid-prompt (no chunked prefill)."""
        if not self.block_manager.prefix_caching or not self.constraints.chunked_prefill:
            return NO_PREFIX
        limit = seq.num_tokens - 1
        if seq.want_prompt_logprobs and seq.prompt_logprobs_upto < seq.num_prompt_tokens:
            limit = min(limit, seq.prompt_logprobs_upto)
        prefix = self.block_manager.match_prefix(seq, limit)
        boundary = self.image_boundary(seq, prefix.num_tokens)
        if boundary < prefix.num_tokens:  # it would end inside an image: stop before it
            prefix = self.block_manager.match_prefix(seq, boundary)
        return prefix
