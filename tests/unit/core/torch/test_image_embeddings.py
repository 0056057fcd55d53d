"""The torch runner's image embeddings (`tgi.core.torch.image_embeddings`): placeholders of a chunk get their
image's encoder output, each image encoded once per request across chunks, kept only while needed."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tgi.core.interfaces.batch import ScheduledSequence  # noqa: E402
from tgi.core.request import ImageInput  # noqa: E402
from tgi.core.sampling_params import SamplingParams  # noqa: E402
from tgi.core.torch.image_embeddings import ImageEmbeddings  # noqa: E402

HIDDEN = 3
PROMPT = [5, 9, 9, 9, 6, 9, 9, 7]  # image 0 at 1..3, image 1 at 5..6


def _encode(pixels: torch.Tensor) -> torch.Tensor:
    """[1, C, H, W] -> one embedding per pixel of the first channel, each row (value, value, value)."""
    return pixels[:, 0].reshape(1, -1, 1).expand(-1, -1, HIDDEN).float()


def _images(num_tokens=(3, 2)) -> tuple[ImageInput, ...]:
    return (
        ImageInput(np.array([[[10.0, 11.0, 12.0]]]), 1, num_tokens[0], b"a"),
        ImageInput(np.array([[[20.0, 21.0]]]), 5, num_tokens[1], b"b"),
    )


def _chunk(rid: str, start: int, end: int, images) -> ScheduledSequence:
    return ScheduledSequence(
        rid, PROMPT[start:end], start, [0, 1], True, end == len(PROMPT), SamplingParams(), 0, len(PROMPT),
        PROMPT, images=images,
    )  # fmt: skip


def test_chunks_get_their_placeholders_embeddings_and_each_image_is_encoded_once() -> None:
    cache = ImageEmbeddings(_encode, torch.device("cpu"))
    images = _images()
    embeds = torch.zeros(len(PROMPT), HIDDEN)
    placed = []
    for start, end in ((0, 2), (2, 6), (6, 8)):
        chunk = torch.zeros(end - start, HIDDEN)
        placed.append(cache.place([_chunk("r", start, end, images)], chunk))
        embeds[start:end] = chunk
        if end < 7:
            assert cache.num_kept_requests == 1  # image 1's last placeholder is not fed yet
    assert placed == [True, True, True]
    assert embeds[:, 0].tolist() == [0, 10, 11, 12, 0, 20, 21, 0]
    assert cache.num_encoded == 2 and cache.num_kept_requests == 0


def test_a_text_chunk_places_nothing_and_freed_requests_are_dropped() -> None:
    cache = ImageEmbeddings(_encode, torch.device("cpu"))
    text_and_image = [_chunk("t", 0, 1, ()), _chunk("r", 0, 2, _images())]
    embeds = torch.zeros(3, HIDDEN)
    assert cache.place(text_and_image, embeds)
    assert embeds[:, 0].tolist() == [0, 0, 10] and cache.num_kept_requests == 1
    cache.drop(["r"])  # preempted or cancelled: a recomputation encodes again
    assert cache.num_kept_requests == 0
    assert not cache.place([_chunk("t", 0, 1, ())], torch.zeros(1, HIDDEN))


def test_an_encoder_output_of_another_length_than_the_placeholders_is_refused() -> None:
    cache = ImageEmbeddings(_encode, torch.device("cpu"))
    with pytest.raises(ValueError, match="made 3 embeddings for 4 placeholder tokens"):
        cache.place([_chunk("r", 0, 8, _images((4, 1)))], torch.zeros(8, HIDDEN))


def test_an_images_extras_reach_the_encoder_by_name_as_tensors() -> None:
    seen = {}

    def encode(pixels: torch.Tensor, *, scale: torch.Tensor) -> torch.Tensor:
        seen["scale"] = scale
        return _encode(pixels) * scale

    image = ImageInput(np.array([[[1.0, 2.0]]]), 1, 2, b"a", {"scale": np.array([3.0])})
    cache = ImageEmbeddings(encode, torch.device("cpu"))
    embeds = torch.zeros(3, HIDDEN)
    assert cache.place([_chunk("r", 0, 3, (image,))], embeds)
    assert isinstance(seen["scale"], torch.Tensor)
    assert embeds[:, 0].tolist() == [0, 3, 6]


def test_only_the_extras_the_encoder_names_reach_it() -> None:
    def encode(pixels: torch.Tensor, *, scale: torch.Tensor) -> torch.Tensor:
        return _encode(pixels) * scale

    extras = {"scale": np.array([2.0]), "per_token_ids": np.array([[1, 2, 3]])}
    image = ImageInput(np.array([[[1.0, 2.0]]]), 0, 2, b"a", extras)
    cache = ImageEmbeddings(encode, torch.device("cpu"), extras=("scale",))
    embeds = torch.zeros(2, HIDDEN)
    assert cache.place([_chunk("r", 0, 2, (image,))], embeds)
    assert embeds[:, 0].tolist() == [2, 4]


def test_the_encoders_time_is_counted_once_per_image() -> None:
    cache = ImageEmbeddings(_encode, torch.device("cpu"))
    assert cache.encoder_seconds == 0.0
    embeds = torch.zeros(len(PROMPT), HIDDEN)
    cache.place([_chunk("r", 0, len(PROMPT), _images())], embeds)
    spent = cache.encoder_seconds
    assert spent > 0.0 and cache.num_encoded == 2
    cache.place([_chunk("r", 0, len(PROMPT), _images())], embeds)  # dropped after its last placeholder:
    assert cache.num_encoded == 4 and cache.encoder_seconds > spent  # encoded, and timed, again
