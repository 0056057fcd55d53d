"""The model's own processor (transformers `AutoProcessor` from the model's folder, loaded once): it expands
each image's placeholder in the prompt text into the model's run of image tokens and makes the pixel
arrays; `ImagePreprocessor.prepare` cuts its output into one `ImageInput` per image, or per tile where the
processor cuts an image into tiles each encoded alone (Idefics3, SmolVLM)."""

from __future__ import annotations

import hashlib
import logging
import os
import struct
from typing import Any

import numpy as np

from tgi.core.request import ImageInput
from tgi.server.images.decode import DecodedImage
from tgi.server.images.limits import ImageError

log = logging.getLogger("tgi.server")

_PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json")
#: the tokens an image's placeholder is wrapped in where the model's tokenizer has them: Qwen2-VL's chat
#: template writes `<|vision_start|><|image_pad|><|vision_end|>` (and TGI the same for markdown images)
_IMAGE_WRAPPERS = (("<|vision_start|>", "<|vision_end|>"),)
#: the processor's per-token outputs and the pixels: not an image's `extras`
_TEXT_KEYS = frozenset({"input_ids", "attention_mask", "token_type_ids", "mm_token_type_ids", "pixel_values"})


class ImagePreprocessor:
    """A processor with an image processor and an image placeholder token (`image_token`)."""

    def __init__(self, processor: Any) -> None:
        self.processor = processor
        self.image_token: str = processor.image_token
        #: the token whose runs are an image's placeholders in the processor's output: the image token, or
        #: the tokenizer's own where the processor expands its image token into runs of another (Gemma 3:
        #: `<start_of_image>` becomes `<start_of_image>`, runs of `<image_soft_token>`, `<end_of_image>`)
        try:  # a tokenizer has an `image_token` only where its model's processor defines one
            soft = processor.tokenizer.image_token
        except AttributeError:
            soft = None
        run_token = soft if soft and soft != self.image_token else self.image_token
        self.image_token_id: int = processor.tokenizer.convert_tokens_to_ids(run_token)
        #: the text an image stands for in a prompt the server writes (not a chat template): its placeholder,
        #: wrapped as the model expects it
        self.image_prompt: str = self.image_token
        vocab = processor.tokenizer.get_vocab()
        for start, end in _IMAGE_WRAPPERS:
            if start in vocab and end in vocab:
                self.image_prompt = f"{start}{self.image_token}{end}"

    @classmethod
    def load(cls, folder: str | None) -> ImagePreprocessor | None:
        """The processor of the model in `folder` when it has one with an image processor and an image
        token; None for a text-only model (or a folder that is not one)."""
        if not folder or not any(os.path.isfile(os.path.join(folder, f)) for f in _PROCESSOR_FILES):
            return None
        processor = load_processor(folder)
        if getattr(processor, "image_processor", None) is None or not getattr(processor, "image_token", None):
            return None
        log.info("image processor: %s", type(processor).__name__)
        return cls(processor)

    def prepare(
        self, text: str, images: list[DecodedImage], add_special_tokens: bool
    ) -> tuple[list[int], tuple[ImageInput, ...]]:
        """`text` (holding one `image_token` where each image goes, in order) tokenized with every image's
        placeholder expanded, and the images as `ImageInput`s (their placeholder runs in those ids, their
        own pixel arrays; one per tile of an image the processor tiles, in prompt order). `ImageError` when
        the text's placeholders and the images do not match."""
        found = text.count(self.image_token)
        if found != len(images):
            raise ImageError(
                f"the prompt has {found} image placeholder(s) `{self.image_token}` for {len(images)} image(s)"
            )
        try:
            out = self.processor(
                text=[text],
                images=[d.image for d in images],
                return_tensors="np",
                add_special_tokens=add_special_tokens,
            )
        except ValueError as exc:
            raise ImageError(f"the model's processor refused the images: {exc}") from None
        ids = [int(t) for t in out["input_ids"][0]]
        extras = {k: v for k, v in out.items() if k not in _TEXT_KEYS}
        # [1, tiles, 3, H, W]: the images cut into tiles, each encoded alone (Idefics3); LLaVA-NeXT's
        # [images, crops, 3, H, W] with each image's `image_sizes` are encoded an image at a time
        if np.ndim(out["pixel_values"]) == 5 and "image_sizes" not in extras:
            return ids, self._tiles(_runs(ids, self.image_token_id), images, out["pixel_values"][0], extras)
        runs = self._spans(_runs(ids, self.image_token_id), images)
        pixels = _per_image(out, len(images))
        made = []
        for i, ((offset, count), decoded) in enumerate(zip(runs, images, strict=True)):
            own = {k: v[i : i + 1] for k, v in extras.items() if _split(v, len(images))}
            made.append(ImageInput(pixels[i], offset, count, decoded.content_hash, own))
        return ids, tuple(made)

    def _tiles(
        self, runs: list[tuple[int, int]], images: list[DecodedImage], frames: Any, extras: dict[str, Any]
    ) -> tuple[ImageInput, ...]:
        """Each tile of each image as its own `ImageInput` (Idefics3 / SmolVLM: the tower encodes each tile
        alone): `frames` [tiles of every image, 3, H, W] in prompt order, one run of placeholders per tile
        (the processor writes text between them), each image's number of tiles as the processor counts
        them (`_get_num_multimodal_tokens`' `num_image_patches`). A tile's `content_hash` is its image's,
        with the tile's index where the image has several."""
        count = getattr(self.processor, "_get_num_multimodal_tokens", None)
        sizes = [(d.image.height, d.image.width) for d in images]
        tiles = getattr(count(image_sizes=sizes), "num_image_patches", None) if count else None
        if tiles is not None:  # Idefics3's counts 0 for an image it does not split: one tile
            tiles = [max(1, int(n)) for n in tiles]
        elif len(runs) == len(images):
            tiles = [1] * len(images)
        if tiles is None or len(runs) != len(frames) or sum(tiles) != len(frames):
            raise ImageError(
                f"the processor made {len(frames)} image tiles and {len(runs)} placeholder runs for "
                f"{len(images)} image(s), which do not match"
            )
        per_tile = {k: np.asarray(v)[0] for k, v in extras.items() if np.shape(v)[:2] == (1, len(frames))}
        made, k = [], 0
        for decoded, n in zip(images, tiles, strict=True):
            for tile in range(n):
                offset, length = runs[k]
                digest = decoded.content_hash if n == 1 else _tile_hash(decoded.content_hash, tile)
                own = {name: v[k : k + 1] for name, v in per_tile.items()}
                made.append(ImageInput(frames[k : k + 1], offset, length, digest, own))
                k += 1
        return tuple(made)

    def _spans(self, runs: list[tuple[int, int]], images: list[DecodedImage]) -> list[tuple[int, int]]:
        """Each image's (offset, count) in the runs of placeholder tokens: adjacent images make one run, cut
        by each image's token count where the processor says it (`_get_num_multimodal_tokens`)."""
        count = getattr(self.processor, "_get_num_multimodal_tokens", None)
        if len(runs) == len(images) or count is None:
            if len(runs) != len(images):
                raise ImageError(
                    f"the processor made {len(runs)} image placeholder runs for {len(images)} image(s)"
                )
            return runs
        sizes = [(d.image.height, d.image.width) for d in images]
        counts = list(count(image_sizes=sizes).num_image_tokens)
        spans, k = [], 0
        for offset, length in runs:
            while length > 0 and k < len(counts) and counts[k] <= length:
                spans.append((offset, counts[k]))
                offset, length, k = offset + counts[k], length - counts[k], k + 1
            if length:
                break
        if len(spans) != len(images) or k != len(counts):
            raise ImageError(f"the processor's image placeholders do not match its {len(images)} image(s)")
        return spans


def load_processor(folder: str) -> Any:
    """transformers' `AutoProcessor` of `folder`; where it fails only because a video processor needs a
    library that is not installed (Qwen2-VL's needs torchvision), the folder's processor class with its
    image processor and tokenizer and no video processor: images are what is served."""
    from transformers import AutoProcessor

    try:
        return AutoProcessor.from_pretrained(folder)
    except ImportError as exc:
        return _images_only_processor(folder, exc)


def _images_only_processor(folder: str, exc: ImportError) -> Any:
    import json

    import transformers
    from transformers import AutoImageProcessor, AutoTokenizer

    with open(os.path.join(folder, "processor_config.json")) as f:
        name = json.load(f).get("processor_class", "")
    cls = getattr(transformers, name, None)
    if cls is None or "video_processor" not in cls.get_attributes():
        raise exc

    class ImagesOnly(cls):  # the class check of the absent video processor is the only thing skipped
        def check_argument_for_proper_class(self, attribute: str, value: Any) -> Any:
            if attribute == "video_processor" and value is None:
                return None
            return super().check_argument_for_proper_class(attribute, value)

    ImagesOnly.__name__ = f"{name} (images only)"
    tokenizer = AutoTokenizer.from_pretrained(folder)
    log.info("image processor %s without its video processor (%s)", name, str(exc).strip().splitlines()[0])
    return ImagesOnly(
        image_processor=AutoImageProcessor.from_pretrained(folder),
        tokenizer=tokenizer,
        video_processor=None,
        chat_template=tokenizer.chat_template,  # None where the folder has none
    )


def _runs(ids: list[int], token: int) -> list[tuple[int, int]]:
    """(offset, length) of each run of `token` in `ids`."""
    runs: list[tuple[int, int]] = []
    for i, t in enumerate(ids):
        if t != token:
            continue
        if runs and runs[-1][0] + runs[-1][1] == i:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((i, 1))
    return runs


def _tile_hash(content_hash: bytes, tile: int) -> bytes:
    """The prefix cache's key for one tile of an image: the image's digest and the tile's index."""
    return hashlib.sha256(b"tile" + struct.pack("<Q", tile) + content_hash).digest()


def _split(value: Any, n: int) -> bool:
    return isinstance(value, np.ndarray) and value.ndim >= 1 and value.shape[0] == n


def _per_image(out: Any, n: int) -> list[Any]:
    """Each image's own `pixel_values`: rows of a batch of images, or (Qwen2-VL's flattened patches) the
    rows its `image_grid_thw` counts."""
    pixels = np.asarray(out["pixel_values"])
    grid = out.get("image_grid_thw")
    if grid is not None:
        ends = np.cumsum(np.prod(np.asarray(grid), axis=1))
        starts = np.concatenate([[0], ends[:-1]])
        return [pixels[a:b] for a, b in zip(starts, ends, strict=True)]
    if pixels.shape[0] != n:
        raise ImageError(f"the processor made pixel arrays for {pixels.shape[0]} images, not {n}")
    return [pixels[i : i + 1] for i in range(n)]
