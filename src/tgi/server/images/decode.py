"""An image's bytes checked and decoded with PIL: the format read from the bytes themselves (a mimetype
that lies is refused), the pixel count checked from the header before any pixel is decoded (a
decompression bomb never expands), a truncated file refused; its content hash taken from the bytes."""

from __future__ import annotations

import hashlib
import io
import warnings
from dataclasses import dataclass
from typing import Any

from tgi.server.images.limits import ImageError, ImageLimits

#: the mimetypes served, and the PIL format each one's bytes must have
MIMETYPE_FORMATS = {
    "image/png": "PNG",
    "image/jpeg": "JPEG",
    "image/jpg": "JPEG",
    "image/gif": "GIF",
    "image/webp": "WEBP",
    "image/bmp": "BMP",
}
_FORMATS = frozenset(MIMETYPE_FORMATS.values())


@dataclass(frozen=True)
class DecodedImage:
    """An image ready for the model's processor: `image` (a PIL image in RGB; a GIF's first frame, as
    TGI takes it) and `content_hash` (sha256 of the encoded bytes: the prefix cache's key for it)."""

    image: Any
    content_hash: bytes


def decode_image(
    data: bytes, mimetype: str | None, limits: ImageLimits, field: str | None = None
) -> DecodedImage:
    """`data` decoded, or `ImageError` with the reason: more bytes than `limits.max_bytes`, a `mimetype`
    not served or not the bytes' real format (None: any served format), bytes no served format reads, more
    pixels than `limits.max_pixels`, or a truncated or corrupt image."""
    from PIL import Image

    if len(data) > limits.max_bytes:
        raise ImageError(f"an image has {len(data)} bytes; --payload-limit allows {limits.max_bytes}", field)
    claimed = None
    if mimetype is not None:
        claimed = MIMETYPE_FORMATS.get(mimetype.lower())
        if claimed is None:
            served = ", ".join(sorted(MIMETYPE_FORMATS))
            raise ImageError(f"unsupported image type `{mimetype}` (served: {served})", field)
    try:
        image = Image.open(io.BytesIO(data), formats=sorted(_FORMATS))
    except Image.DecompressionBombError:
        raise ImageError(
            f"an image is over --max-image-pixels ({limits.max_pixels}): a decompression bomb", field
        ) from None
    except Exception:
        raise ImageError(
            "the image data is not an image of a served type (PNG, JPEG, GIF, WebP, BMP)", field
        ) from None
    if claimed is not None and image.format != claimed:
        raise ImageError(f"the image is declared `{mimetype}` but its bytes are {image.format}", field)
    width, height = image.size
    if width * height > limits.max_pixels:
        raise ImageError(
            f"an image of {width}x{height} pixels is over --max-image-pixels ({limits.max_pixels})", field
        )
    try:
        with warnings.catch_warnings():  # the pixel count is checked above, against our own limit
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image.load()
            rgb = image.convert("RGB")
    except Exception:
        raise ImageError("the image is truncated or corrupt", field) from None
    return DecodedImage(rgb, hashlib.sha256(data).digest())
