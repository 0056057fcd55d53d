"""Where a request names its images: TGI's markdown images inside `inputs` (`![](data:...)`,
`![](https://...)`) and OpenAI's `image_url` content parts, as `ImageRef`s in prompt order."""

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
