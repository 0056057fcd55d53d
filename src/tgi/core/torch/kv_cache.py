"""Paged key/value storage on a torch backend's device."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

from tgi.core.interfaces.types import KVCacheSpec

if TYPE_CHECKING:
    import torch


class KVCache(ABC):
    """`num_blocks` blocks of `spec.block_size` token slots for every layer, in the backend's own layout.

    A slot is `block_id * block_size + offset`. The block manager in core decides which blocks a sequence
    owns; the cache only stores. Contract: `write` makes the keys/values visible to the attention backend's
    next `prefill`/`decode` call on the same layer; slots it is not given are left unchanged.
    """

    def __init__(self, spec: KVCacheSpec, num_blocks: int) -> None:
        self.spec = spec
        self.num_blocks = num_blocks

    @abstractmethod
    def write(
        self, layer_idx: int, key: torch.Tensor, value: torch.Tensor, slot_mapping: torch.Tensor
    ) -> None:
        """Store `key`/`value` [T, num_kv_heads, head_dim] of T new tokens at `slot_mapping` [T] (int64).
        A negative slot means "do not store" (padding tokens of static-shape runners)."""

    @abstractmethod
    def layer(self, layer_idx: int) -> Any:
        """The storage of one layer, in the layout the backend's attention reads."""
