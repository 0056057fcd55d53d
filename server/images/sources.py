"""Where a request names its images, as `ImageRef`s in prompt order: TGI's markdown images inside `inputs`
(`![](data:...)`, `![](https://...)`), and the image parts of chat-template messages (`image_part`), which
OpenAI's `image_url` parts, Responses' `input_image` parts and Anthropic's `image` blocks all become."""

from __future__ import annotations

import re
from dataclasses import dataclass

# TGI's markdown image: `![alt](url)`; the URL has no spaces or closing parenthesis
_MARKDOWN_IMAGE = re.compile(r"!\[[^\]]*\]\(([^)\s]*)\)")


@dataclass(frozen=True)
class ImageRef:
    """One image a request names: its `url` (data:, http(s):, file:) and the request field that gave it
    (its errors name that field)."""

    url: str
    field: str


def split_markdown(text: str, field: str = "inputs") -> tuple[list[str], list[ImageRef]]:
    """`text` cut at its markdown images: the text pieces around them (one more than the images, so that
    image i sits between pieces i and i + 1) and the images in order."""
    pieces: list[str] = []
    refs: list[ImageRef] = []
    start = 0
    for match in _MARKDOWN_IMAGE.finditer(text):
        pieces.append(text[start : match.start()])
        refs.append(ImageRef(match.group(1), field))
        start = match.end()
    pieces.append(text[start:])
    return pieces, refs


#: the `type` of an image content part of a chat-template message (templates of vision models render it
#: as the model's image placeholder)
IMAGE_PART = "image"


def image_part(url: str, field: str) -> dict:
    """A chat message's content part for an image: what chat templates render as its placeholder
    (`{"type": "image"}`), carrying the image's `url` and the request `field` that gave it, which
    `split_images` reads back. Every API's image parts become this."""
    return {"type": IMAGE_PART, "url": url, "field": field}


def split_images(messages: list[dict]) -> tuple[list[dict], list[ImageRef]]:
    """`messages` as the chat template takes them (each `image_part` reduced to `{"type": "image"}`) and
    their images as `ImageRef`s in prompt order. Messages without image parts are returned as they are."""
    shown: list[dict] = []
    refs: list[ImageRef] = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list) or not any(_is_image(p) for p in content):
            shown.append(message)
            continue
        parts = []
        for part in content:
            if _is_image(part):
                refs.append(ImageRef(part["url"], part["field"]))
                parts.append({"type": IMAGE_PART})
            else:
                parts.append(part)
        shown.append({**message, "content": parts})
    return shown, refs


def _is_image(part: object) -> bool:
    return isinstance(part, dict) and part.get("type") == IMAGE_PART and "url" in part
