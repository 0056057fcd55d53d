"""Buckets: the sizes one dimension of a compiled step may take (no torch here); a size above the largest
is an error (`ShapeError`), never a silent truncation."""

from __future__ import annotations

from dataclasses import dataclass


class ShapeError(ValueError):
    """A batch does not fit the largest bucket (the scheduler was given other constraints than these)."""


@dataclass(frozen=True)
class Buckets:
    """The sizes one dimension may take, ascending; `fit(n)` is the smallest that holds `n`."""

    sizes: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.sizes or any(s < 1 for s in self.sizes) or list(self.sizes) != sorted(set(self.sizes)):
            raise ValueError(f"buckets must be distinct positive sizes in ascending order, got {self.sizes}")

    @classmethod
    def multiples(cls, step: int, maximum: int) -> Buckets:
        """`step, 2*step, ...` up to `maximum`, which is always the last (TGI Gaudi's bucket sizes)."""
        if step < 1 or maximum < 1:
            raise ValueError(f"bucket step and maximum must be >= 1, got {step} and {maximum}")
        return cls((*range(step, maximum, step), maximum))

    @classmethod
    def powers_of_two(cls, maximum: int, minimum: int = 1) -> Buckets:
        """`minimum, 2*minimum, 4*minimum, ...` below `maximum`, then `maximum`."""
        return cls.geometric(maximum, minimum, 2)

    @classmethod
    def geometric(cls, maximum: int, minimum: int = 1, factor: int = 2) -> Buckets:
        """`minimum, factor*minimum, factor**2*minimum, ...` below `maximum`, then `maximum` (a larger
        factor: fewer buckets, so fewer compiles, and more padding)."""
        if minimum < 1 or maximum < 1 or factor < 2:
            raise ValueError(
                f"bucket minimum and maximum must be >= 1 and the factor >= 2, got {minimum}, {maximum}, {factor}"
            )
        sizes, s = [], minimum
        while s < maximum:
            sizes.append(s)
            s *= factor
        return cls((*sizes, maximum))

    @property
    def max(self) -> int:
        return self.sizes[-1]

    def fit(self, n: int) -> int:
        """The smallest bucket >= n; `ShapeError` when n exceeds the largest."""
        for s in self.sizes:
            if s >= n:
                return s
        raise ShapeError(f"{n} exceeds the largest bucket {self.max}")

    def below(self, size: int) -> int:
        """The bucket before `size` (0 for the first): sizes above it and up to `size` pad to `size`."""
        i = self.sizes.index(size)
        return self.sizes[i - 1] if i else 0
