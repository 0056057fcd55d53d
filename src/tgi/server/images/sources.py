"""Where a request names its images, as `ImageRef`s in prompt order: TGI's markdown images inside `inputs`
(`![](data:...)`, `![](https://...)`), and the image parts of chat-template messages (`image_part`), which
OpenAI's `image_url` parts, Responses' `input_image` parts and Anthropic's `image` blocks all become."""

from __future__ import annotations

import re
from dataclasses import dataclass

# where a markdown image's URL ends: its closing parenthesis, or whitespace (then it is no image)
_URL_END = re.compile(r"[)\s]")


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
    for begin, url_start, url_end in _markdown_images(text):
        pieces.append(text[start:begin])
        refs.append(ImageRef(text[url_start:url_end], field))
        start = url_end + 1
    pieces.append(text[start:])
    return pieces, refs


def _markdown_images(text: str):
    """(start, URL start, URL end) of each markdown image `![alt](url)` in `text`, left to right: the alt text
    runs to the first `]`, which `(` must follow; the URL runs to the first `)` or whitespace and must end at
    a `)`. The same matches as the regular expression this replaces, in time linear in the text: that
    pattern, tried at each `![`, ran to the end of the text from each (`![](` repeated: 64 KB took 15 s on
    the event loop). Here the next `]` and the next `)`-or-whitespace are looked up once and reused while
    they lie ahead of the candidate."""
    close = url_end = -1  # the last found `]` and `)`-or-space (-2: none ahead of that point)
    i = text.find("![")
    while i >= 0:
        if close != -2 and close < i + 2:
            close = text.find("]", i + 2)
            close = -2 if close < 0 else close
        if close == -2:
            return  # no `]` after this point: no image either
        if text.startswith("(", close + 1):
            if url_end != -2 and url_end < close + 2:
                found = _URL_END.search(text, close + 2)
                url_end = found.start() if found else -2
            if url_end == -2:
                return  # no `)` after this point
            if text[url_end] == ")":
                yield i, close + 2, url_end
                i = text.find("![", url_end + 1)
                continue
        i = text.find("![", i + 1)


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
