"""Image bytes and URLs for tests of image requests: real encoded images made with PIL."""

from __future__ import annotations

import base64
import io


def image_bytes(width: int = 8, height: int = 8, fmt: str = "PNG", color=(200, 30, 60)) -> bytes:
    """An image of one `color`, encoded in `fmt`."""
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (width, height), color).save(out, format=fmt)
    return out.getvalue()


def data_url(data: bytes, mimetype: str = "image/png") -> str:
    return f"data:{mimetype};base64,{base64.b64encode(data).decode()}"
