"""Collective communication between the ranks of a tensor-parallel group."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any


class Collective(ABC):
    """Rank-to-rank communication, used by the model's parallel layers and by the engine.

    Contract: every rank calls the same collectives in the same order with tensors of the same shape and
    dtype. Tensors are the backend's own type (torch tensors for torch backends, JAX arrays for JAX ones);
    nothing in this interface is tied to one framework. With `world_size == 1` every call is the identity.
    """

    @property
    @abstractmethod
    def rank(self) -> int:
        """This process's rank in [0, world_size)."""

    @property
    @abstractmethod
    def world_size(self) -> int:
        """Number of ranks in the group."""

    @abstractmethod
    def all_reduce(self, tensor: Any) -> Any:
        """Sum `tensor` over all ranks; every rank gets the sum (in place where the framework allows)."""

    @abstractmethod
    def all_gather(self, tensor: Any, dim: int = -1) -> Any:
        """Concatenate every rank's `tensor` along `dim`, in rank order; every rank gets the result."""

    @abstractmethod
    def broadcast(self, obj: Any, src: int = 0) -> Any:
        """Send a tensor or a picklable object from rank `src` to all; returns it on every rank."""

    @abstractmethod
    def barrier(self) -> None:
        """Block until every rank has reached this call."""


class SingleProcessCollective(Collective):
    """The collective of a group of one: every operation is the identity."""

    @property
    def rank(self) -> int:
        return 0

    @property
    def world_size(self) -> int:
        return 1

    def all_reduce(self, tensor: Any) -> Any:
        return tensor

    def all_gather(self, tensor: Any, dim: int = -1) -> Any:
        return tensor

    def broadcast(self, obj: Any, src: int = 0) -> Any:
        return obj

    def barrier(self) -> None:
        return None
