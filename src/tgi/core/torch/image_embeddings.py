"""A step's image embeddings for the torch runner: the vision tower's output put in place of the placeholder
tokens a prefill chunk feeds, each image encoded once per request.

A request's encoder output is kept (per image) from the chunk that first feeds one of its placeholders until
the chunk that feeds its last placeholder; then it is dropped, as it is when the request finishes, is
cancelled or is preempted (`ScheduledBatch.freed_request_ids`: a recomputation encodes its images again).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import torch

from tgi.core.interfaces.batch import ScheduledSequence
from tgi.core.request import ImageInput

#: encode(pixel_values [N, 3, H, W], **extras) -> [N, tokens per image, hidden] (or [tokens, hidden]);
#: `extras`: the image's `ImageInput.extras` by name, arrays as tensors on the runner's device (LLaVA has
#: none; Idefics3 its `pixel_attention_mask`, ...)
Encoder = Callable[..., torch.Tensor]


class ImageEmbeddings:
    """The encoder output of the images of requests whose placeholders are not all prefilled yet."""

    def __init__(self, encode: Encoder, device: torch.device, extras: Sequence[str] | None = None) -> None:
        self._encode = encode
        self._device = device
        self._extras = None if extras is None else frozenset(extras)  # the names `encode` takes (None: all)
        self._kept: dict[str, dict[int, torch.Tensor]] = {}  # request id -> image index -> [tokens, hidden]
        self.num_encoded = 0  # images run through the tower since start
        self.encoder_seconds = 0.0  # time in the tower since start (the device's work waited for)

    @property
    def num_kept_requests(self) -> int:
        return len(self._kept)

    def drop(self, request_ids: Sequence[str]) -> None:
        """Forget the encoder output of these requests (finished, cancelled or preempted)."""
        for request_id in request_ids:
            self._kept.pop(request_id, None)

    def place(self, seqs: Sequence[ScheduledSequence], embeds: torch.Tensor) -> bool:
        """Write into `embeds` ([T, hidden], the batch's token embeddings, sequences in batch order) the
        image embeddings of every placeholder the step feeds; returns whether there was any. `ValueError`
        when an image's encoder output does not have one embedding per placeholder."""
        placed = False
        row = 0
        for seq in seqs:
            first, last = seq.start_pos, seq.start_pos + len(seq.token_ids)
            for index, image in enumerate(seq.images):
                lo, hi = max(first, image.offset), min(last, image.offset + image.num_tokens)
                if lo >= hi:
                    continue
                features = self._features(seq.request_id, index, image)
                embeds[row + lo - first : row + hi - first] = features[
                    lo - image.offset : hi - image.offset
                ].to(embeds.dtype)
                placed = True
            if seq.images and last >= max(im.offset + im.num_tokens for im in seq.images):
                self._kept.pop(seq.request_id, None)  # every placeholder is prefilled
            row += len(seq.token_ids)
        return placed

    def _features(self, request_id: str, index: int, image: ImageInput) -> torch.Tensor:
        kept = self._kept.setdefault(request_id, {})
        features = kept.get(index)
        if features is None:
            pixels = torch.as_tensor(image.pixel_values, device=self._device)
            if pixels.dim() == 3:
                pixels = pixels.unsqueeze(0)
            extras = {
                k: _tensor(v, self._device)
                for k, v in image.extras.items()
                if self._extras is None or k in self._extras
            }
            started = time.perf_counter()
            encoded = self._encode(pixels, **extras)
            # an asynchronous device: wait for the tower, so that the time is its work, not its launch (one
            # wait per image, on the steps that encode one only)
            if encoded.device.type != "cpu":
                torch.accelerator.synchronize(encoded.device)
            self.encoder_seconds += time.perf_counter() - started
            features = encoded.reshape(-1, encoded.shape[-1])
            self.num_encoded += 1
            if features.shape[0] != image.num_tokens:
                raise ValueError(
                    f"image {index} of request {request_id}: the vision tower made {features.shape[0]} "
                    f"embeddings for {image.num_tokens} placeholder tokens"
                )
            kept[index] = features
        return features


def _tensor(value: object, device: torch.device) -> object:
    """An extra as the encoder takes it: arrays as tensors on `device`, anything else as it is."""
    if isinstance(value, torch.Tensor) or hasattr(value, "__array__"):
        return torch.as_tensor(value, device=device)
    return value
