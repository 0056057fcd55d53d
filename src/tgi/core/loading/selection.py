"""Which part of each tensor a caller reads (no torch here): shared by the format loaders and the dispatcher
(`resolve.py`), which imports them, so that no loader imports the dispatcher back."""

from __future__ import annotations

from collections.abc import Callable

# A selector decides, per Hugging Face parameter name, what a caller (e.g. one tensor-parallel rank) reads:
#   None or False -> skip the tensor; True or Ellipsis -> the whole tensor;
#   a tuple of slices (or a single slice) -> only `tensor[spec]` (safetensors reads just that part).
WeightSelector = Callable[[str], object]
SKIP = object()


def selection(select: WeightSelector | None, name: str) -> object:
    """Normalise `select(name)`: `SKIP`, None (whole tensor) or an index tuple for `tensor[...]`."""
    if select is None:
        return None
    spec = select(name)
    if spec is None or spec is False:
        return SKIP
    if spec is True or spec is Ellipsis:
        return None
    if isinstance(spec, slice):
        return (spec,)
    if isinstance(spec, tuple) and all(isinstance(s, slice) or s is Ellipsis for s in spec):
        return spec
    raise TypeError(f"weight selector returned {spec!r} for {name!r}: expected None, a bool, or slices")
