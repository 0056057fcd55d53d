import random
import re
import time

import pytest

from tgi.server.images.sources import ImageRef, split_markdown


def test_markdown_images_are_cut_out_in_order_with_the_text_around_them():
    pieces, refs = split_markdown("a ![](data:image/png;base64,AAAA) b ![cat](https://x.test/c.png)")
    assert pieces == ["a ", " b ", ""]
    assert refs == [
        ImageRef("data:image/png;base64,AAAA", "inputs"),
        ImageRef("https://x.test/c.png", "inputs"),
    ]


def test_text_without_images_is_one_piece():
    assert split_markdown("no [link](x) here") == (["no [link](x) here"], [])


# the pattern TGI's markdown images were once found with (kept here as the reference the scan must equal)
_PATTERN = re.compile(r"!\[[^\]]*\]\(([^)\s]*)\)")


def _by_pattern(text: str) -> tuple[list[str], list[ImageRef]]:
    pieces, refs, start = [], [], 0
    for m in _PATTERN.finditer(text):
        pieces.append(text[start : m.start()])
        refs.append(ImageRef(m.group(1), "inputs"))
        start = m.end()
    return [*pieces, text[start:]], refs


def test_the_scan_finds_what_the_pattern_finds():
    rng = random.Random(0)
    alphabet = ["!", "[", "]", "(", ")", " ", "\n", "a", "![", "](", "![](", "![a](u)", "x)"]
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randrange(40))) for _ in range(20000)]
    texts += ["![](a)![](b)", "![a](b c) ![d](e)", "![[x]](y)", "![](u", "![]()", "!![a](b))"]
    for text in texts:
        assert split_markdown(text) == _by_pattern(text), text


@pytest.mark.parametrize("unit", ["![](", "![", "![a]", "![](a ", "]("])
def test_a_megabyte_of_image_openers_is_scanned_in_linear_time(unit):
    for size in (64_000, 1_000_000):  # 64 KB first: the quadratic pattern fails there in ~15 s, not hours
        text = unit * (size // len(unit))
        t0 = time.process_time()
        split_markdown(text)
        # linear: 0.13 s for the megabyte on a 2-core Intel Xeon (AMX); 5 s is 10x that on the slowest kind
        assert time.process_time() - t0 < 5.0, size
