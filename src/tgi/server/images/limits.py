"""The limits an image of a request is held to (`--max-images-per-request`, `--max-image-pixels`, the
decoded bytes within `--payload-limit`), and `ImageError`, the refusal every image module raises."""

from __future__ import annotations

from dataclasses import dataclass


class ImageError(ValueError):
    """An image the request cannot have, with the reason (the server's 422, OpenAI's 400 on /v1, naming
    `field`, the request field that gave the image)."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class ImageLimits:
    max_images: int = 4  # images in one request (--max-images-per-request; vLLM's limit_mm_per_prompt)
    max_pixels: int = 4096 * 4096  # width x height of one image (--max-image-pixels); more: a bomb, refused
    max_bytes: int = 2_000_000  # encoded bytes of one image once decoded from its URL (--payload-limit)


def check_count(count: int, limits: ImageLimits, field: str | None = None) -> None:
    """`ImageError` when a request names more images than `--max-images-per-request` allows."""
    if count > limits.max_images:
        raise ImageError(
            f"the request has {count} images; --max-images-per-request allows {limits.max_images}", field
        )
