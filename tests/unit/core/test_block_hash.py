"""Prefix-cache block identity with images: a block holding a placeholder of an image is keyed by the image's
content too (`tgi.core.block_hash`), at the hash and at the block-manager level."""

from __future__ import annotations

from tgi.core.block_hash import block_hash, extend_block_hashes, root_hash
from tgi.core.block_manager import NO_PREFIX, BlockManager
from tgi.core.request import ImageInput
from tgi.core.sequence import Sequence

BS = 4
IMAGE_ID = 7  # a placeholder token id


def _image(content: bytes, offset: int = 5, num_tokens: int = 3) -> ImageInput:
    return ImageInput(pixel_values=None, offset=offset, num_tokens=num_tokens, content_hash=content)


def _prompt() -> list[int]:
    return [1, 2, 3, 4, 5, IMAGE_ID, IMAGE_ID, IMAGE_ID, 9, 10, 11, 12, 13]  # image at 5..7: block 1 only


def test_only_blocks_holding_a_placeholder_and_those_after_them_change_with_the_image() -> None:
    root = root_hash(b"m", b"")
    text, cat, dog, cat_again = [], [], [], []
    extend_block_hashes(text, _prompt(), BS, 10, root)
    extend_block_hashes(cat, _prompt(), BS, 10, root, [_image(b"cat")])
    extend_block_hashes(dog, _prompt(), BS, 10, root, [_image(b"dog")])
    extend_block_hashes(cat_again, _prompt(), BS, 10, root, [_image(b"cat")])
    assert len(cat) == 3
    assert text[0] == cat[0] == dog[0]  # block 0 holds no placeholder
    assert len({text[1], cat[1], dog[1]}) == 3 and len({text[2], cat[2], dog[2]}) == 3  # chained after it
    assert cat == cat_again
    assert cat[1] == block_hash(cat[0], _prompt()[4:8], [b"cat"])
    # an image spanning two blocks keys both; two images in one block key it by both, in order
    span: list[bytes] = []
    extend_block_hashes(span, _prompt(), BS, 10, root, [_image(b"cat", offset=3, num_tokens=2)])
    assert span[0] != text[0] and span[1] != text[1]
    two_ab, two_ba = [], []
    extend_block_hashes(two_ab, _prompt(), BS, 10, root, [_image(b"a", 4, 1), _image(b"b", 6, 1)])
    extend_block_hashes(two_ba, _prompt(), BS, 10, root, [_image(b"b", 4, 1), _image(b"a", 6, 1)])
    assert two_ab[1] != two_ba[1]
    assert block_hash(b"p", [1], [b"ab", b"c"]) != block_hash(b"p", [1], [b"a", b"bc"])


def _computed(bm: BlockManager, rid: str, images: tuple[ImageInput, ...]) -> Sequence:
    seq = Sequence(rid, _prompt(), images=images)
    prefix = bm.match_prefix(seq)
    n = len(_prompt()) - prefix.num_tokens
    bm.allocate(seq, n, prefix)
    seq.num_computed_tokens += n
    bm.cache_computed(seq)
    return seq


def test_same_text_another_image_shares_only_the_blocks_before_it_the_same_image_shares_all() -> None:
    bm = BlockManager(32, BS, prefix_caching=True, namespace=b"model@rev")
    cat = _computed(bm, "a", (_image(b"cat"),))
    dog = Sequence("b", _prompt(), images=(_image(b"dog"),))
    assert bm.match_prefix(dog).block_ids == tuple(cat.block_table[:1])  # the text before the image
    text_only = Sequence("c", _prompt())
    assert bm.match_prefix(text_only).num_tokens == 4
    again = bm.match_prefix(Sequence("d", _prompt(), images=(_image(b"cat"),)))
    assert again.block_ids == tuple(cat.block_table[:3]) and again.num_tokens == 12
    bm.free(cat)
    assert bm.match_prefix(Sequence("e", [99, *_prompt()[1:]], images=(_image(b"cat"),))) is NO_PREFIX
    bm.check_invariants()
