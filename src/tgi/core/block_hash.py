"""Prefix-cache block identity: a SHA-256 chained over full blocks of token ids (no torch here).

A full block's hash covers its own token ids and its parent's hash, so equal hashes mean equal whole
prefixes, not just equal blocks. The first block's parent is a root that folds in everything besides the
tokens that changes the keys/values or must keep requests apart: the engine's namespace (model and
revision) and the request's `cache_key` (`request_cache_key`: a LoRA adapter, the client's `cache_salt`, the
tenant). SHA-256 rather than Python's `hash`, which is salted per process and easy to collide on purpose
(vLLM moved to SHA-256 after GHSA-rm76-4mrf-v9r8): a collision would hand one request another's keys/values.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tgi.core.request import ImageInput

_DOMAIN = b"tgi-prefix-cache-v1\0"
_IMAGE = b"image\0"  # before each image's content hash in a block's hash


def root_hash(namespace: bytes, cache_key: bytes) -> bytes:
    """The parent of a sequence's first block. Length-prefixed, so (b"ab", b"c") != (b"a", b"bc")."""
    h = hashlib.sha256(_DOMAIN)
    for part in (namespace, cache_key):
        h.update(struct.pack("<Q", len(part)))
        h.update(part)
    return h.digest()


def request_cache_key(adapter: bytes = b"", tenant: str | None = None, salt: str | None = None) -> bytes:
    """A sequence's `cache_key`: its LoRA adapter's key (b"": the base model), the authenticated tenant (the
    server's --api-key-file) and the client's `cache_salt` (vLLM's field). Blocks are shared only between
    equal keys, so two tenants, or two salts, never read each other's blocks, and a request with neither
    shares only with others that have neither. Without a tenant or a salt it is the adapter's key as it is;
    with either, a tag byte (no adapter key starts with it) and the SHA-256 of a length-prefixed encoding of
    all three: no choice of salt spells another (tenant, salt) pair's key, and a long salt costs one hash
    per request, not one per block."""
    if tenant is None and salt is None:
        return adapter
    h = hashlib.sha256(b"tgi-cache-key\0")
    for part in (
        adapter,
        b"" if tenant is None else b"t" + tenant.encode(),
        b"" if salt is None else b"s" + salt.encode(),
    ):
        h.update(struct.pack("<Q", len(part)))
        h.update(part)
    return b"\0" + h.digest()


def block_hash(parent: bytes, token_ids: Sequence[int], image_hashes: Sequence[bytes] = ()) -> bytes:
    """The hash of one full block: its parent's hash, its token ids as little-endian int64, then the content
    hash of each image with a placeholder in the block (length-prefixed; none: the text-only hash)."""
    h = hashlib.sha256(parent)
    h.update(struct.pack(f"<{len(token_ids)}q", *token_ids))
    for digest in image_hashes:
        h.update(_IMAGE + struct.pack("<Q", len(digest)))
        h.update(digest)
    return h.digest()


def extend_block_hashes(
    hashes: list[bytes],
    token_ids: Sequence[int],
    block_size: int,
    num_blocks: int,
    root: bytes,
    images: Sequence[ImageInput] = (),
) -> None:
    """Append to `hashes` (the hashes of the first `len(hashes)` blocks of `token_ids`) until it holds
    `num_blocks`, or every full block of `token_ids` if fewer. Token lists only grow, so a hash, once
    computed, stays valid: each block is hashed once per sequence. A block holding any placeholder of one of
    `images` (the prompt's, in prompt order) folds in that image's `content_hash`: the same text with another
    image never shares the block (nor, through the chain, any block after it)."""
    last_full = min(num_blocks, len(token_ids) // block_size)
    for i in range(len(hashes), last_full):
        parent = hashes[i - 1] if i else root
        start, end = i * block_size, (i + 1) * block_size
        in_block = [im.content_hash for im in images if im.offset < end and im.offset + im.num_tokens > start]
        hashes.append(block_hash(parent, token_ids[start:end], in_block))
