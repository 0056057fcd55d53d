"""Synthetic images for the serving benchmark's image workload: deterministic PNGs (PIL) sent as data URLs."""

from __future__ import annotations

import base64
import io
import zlib


def png_data_url(size: int, key: str) -> str:
    """A `size` x `size` RGB PNG as a `data:image/png;base64,` URL; the same `key` gives the same bytes, and
    different keys different images (so the prefix cache, keyed by image content, does not share them).
    `ValueError` for a size below 1."""
    import numpy as np
    from PIL import Image

    if size < 1:
        raise ValueError(f"image size must be >= 1, got {size}")
    rng = np.random.default_rng(zlib.crc32(key.encode()))
    pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")
