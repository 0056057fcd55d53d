"""M-RoPE positions (Qwen2-VL, Qwen2.5-VL): each token has three positions (temporal, height, width).

A text token's three are equal; an image's placeholder tokens take the image's grid (the tower's patch grid
after the spatial merge): temporal = start + t, height = start + row, width = start + column, where `start`
is the position the image begins at; the text after an image goes on from `start + max(rows, columns)`
(transformers' `get_rope_index` for images). So a prompt's positions are known from its length and its
images' spans and grids alone; every token after the prompt (each decode, and the generated tokens a
recomputation feeds again) is at `index + delta`, `delta` being the prompt's ("rope delta").

`RequestPositions` computes a request's prompt positions once, from the first prefill chunk that carries
its images, keeps them until the prompt is prefilled and then only its delta until the request is freed
(finished, cancelled or preempted: a recomputation computes the same again), and builds a step's position tensor: [T] when every token of the step has three
equal positions (decodes, text-only requests, text chunks), [3, T] when a chunk feeds image placeholders.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from tgi.core.interfaces.batch import ScheduledSequence
from tgi.core.request import ImageInput
from tgi.core.torch.host_transfer import to_device

#: the `ImageInput.extras` entry holding an image's [1, 3] patch grid (temporal, height, width)
GRID_KEY = "image_grid_thw"


@dataclass(frozen=True)
class PromptPositions:
    """One request's M-RoPE positions: `rows[k][i]` is position k (temporal, height, width) of prompt token
    i; a token at index i >= `num_prompt_tokens` is at i + `delta` (all three). Once the prompt is prefilled
    only `delta` is needed: `rows` is then empty (`decoding()`)."""

    num_prompt_tokens: int
    rows: tuple[list[int], list[int], list[int]]
    delta: int
    spans: tuple[tuple[int, int], ...]  # each image's placeholders: (offset, end)

    def decoding(self) -> PromptPositions:
        """These positions without the prompt's rows (what the tokens after the prompt need)."""
        return PromptPositions(self.num_prompt_tokens, ([], [], []), self.delta, ())

    def has_rows(self, start: int) -> bool:
        """Whether these positions can say those of the tokens from `start` on."""
        return start >= self.num_prompt_tokens or len(self.rows[0]) == self.num_prompt_tokens

    def feeds_image(self, start: int, end: int) -> bool:
        """Whether tokens start .. end - 1 hold any image placeholder."""
        return any(lo < end and start < hi for lo, hi in self.spans)

    def row(self, k: int, start: int, end: int) -> list[int]:
        """Position k of tokens start .. end - 1."""
        n = self.num_prompt_tokens
        return self.rows[k][start:end] + list(range(max(start, n) + self.delta, end + self.delta))


def image_grid(image: ImageInput, index: int) -> tuple[int, int, int]:
    """The image's (t, h, w) patch grid from its extras; `ValueError` naming what is missing."""
    grid = image.extras.get(GRID_KEY)
    if grid is None:
        raise ValueError(f"image {index} has no `{GRID_KEY}` (the Qwen2-VL processor's patch grid)")
    t, h, w = (int(v) for v in torch.as_tensor(grid).reshape(-1).tolist())
    return t, h, w


def prompt_positions(
    num_prompt_tokens: int, images: Sequence[ImageInput], spatial_merge_size: int
) -> PromptPositions:
    """The M-RoPE positions of a prompt of `num_prompt_tokens` tokens with `images` (in prompt order, each's
    placeholders at offset .. offset + num_tokens - 1), as transformers' `get_rope_index` makes them.
    `ValueError` when an image's placeholder count is not its merged grid's size."""
    rows: tuple[list[int], list[int], list[int]] = ([], [], [])
    next_pos = at = 0  # the position the next token starts from, and the prompt index it is at

    def text(upto: int) -> None:
        nonlocal next_pos, at
        span = range(next_pos, next_pos + upto - at)
        for row in rows:
            row.extend(span)
        next_pos, at = next_pos + upto - at, upto

    spans = []
    for index, image in enumerate(images):
        t, h, w = image_grid(image, index)
        h, w = h // spatial_merge_size, w // spatial_merge_size
        if t * h * w != image.num_tokens:
            raise ValueError(
                f"image {index}: a {t}x{h}x{w} merged grid for {image.num_tokens} placeholder tokens"
            )
        text(image.offset)
        for ti in range(t):
            for hi in range(h):
                rows[0].extend([next_pos + ti] * w)
                rows[1].extend([next_pos + hi] * w)
                rows[2].extend(range(next_pos, next_pos + w))
        next_pos += max(h, w)  # transformers' step past an image (its grid's t is 1)
        at = image.offset + image.num_tokens
        spans.append((image.offset, at))
    text(num_prompt_tokens)
    top = max((max(row) for row in rows if row), default=-1)
    return PromptPositions(num_prompt_tokens, rows, top + 1 - num_prompt_tokens, tuple(spans))


class RequestPositions:
    """The M-RoPE positions of the requests a runner is serving (those with images; the others have plain
    positions), and each step's position tensor."""

    def __init__(self, spatial_merge_size: int) -> None:
        self.spatial_merge_size = spatial_merge_size
        self._kept: dict[str, PromptPositions] = {}  # request id -> its positions

    @property
    def num_kept_requests(self) -> int:
        return len(self._kept)

    def drop(self, request_ids: Sequence[str]) -> None:
        """Forget the positions of these requests (finished, cancelled or preempted)."""
        for request_id in request_ids:
            self._kept.pop(request_id, None)

    def _of(self, seq: ScheduledSequence) -> PromptPositions | None:
        kept = self._kept.get(seq.request_id)
        if seq.images and (kept is None or not kept.has_rows(int(seq.start_pos))):
            # a prefill chunk of a request with images (every one carries them): computed once, again only
            # for a recomputation whose positions were not dropped
            kept = prompt_positions(seq.num_prompt_tokens, seq.images, self.spatial_merge_size)
            self._kept[seq.request_id] = kept
        return kept

    def build(self, seqs: Sequence[ScheduledSequence], device: torch.device | str | None) -> torch.Tensor:
        """The step's positions, tokens in batch order: [T] int64 when each token's three are equal, else
        [3, T] int64 (a chunk feeds image placeholders). Decodes continue from each prompt's `delta`."""
        kept = [self._of(seq) for seq in seqs]
        spans = [(int(seq.start_pos), int(seq.start_pos) + len(seq.token_ids)) for seq in seqs]
        three = any(
            p is not None and seq.is_prefill and p.feeds_image(*span)
            for seq, p, span in zip(seqs, kept, spans, strict=True)
        )
        rows: list[list[int]] = [[] for _ in range(3 if three else 1)]
        for seq, p, (start, end) in zip(seqs, kept, spans, strict=True):
            for k, row in enumerate(rows):
                row.extend(range(start, end) if p is None else p.row(k, start, end))
            if p is not None and p.rows[0] and end >= p.num_prompt_tokens:
                self._kept[seq.request_id] = p.decoding()  # the prompt is in the KV cache
        flat = to_device([v for row in rows for v in row], torch.int64, device)
        return flat.view(3, -1) if three else flat
