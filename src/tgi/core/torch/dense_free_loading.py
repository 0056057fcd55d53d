"""Linears loaded without their dense copy: where the backend computes a stored block format for every row
count (`TorchBackend.standalone_block_types`), a linear whose weight parts are all stored in such formats
never has its dense weight dequantized nor written; the checkpoint's tensor reaches `load_weights` as a meta
tensor of its shape (the model drops the dense weight: `drop_dense_weight`), and the backend's kernel over the
blocks is the layer's only product. The load then reads ~1 byte per weight instead of dequantizing 4
(float32) and the peak memory of the load stays near the blocks' size.

Not for the embedding table (its rows are looked up densely; a head tied to it still gets its blocks), not
under tensor parallelism (no blocks there) and not with `--quantize` (which quantizes the dense weights).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

import torch

from tgi.core.interfaces.types import UnsupportedError
from tgi.core.loading.selection import SKIP, WeightSelector, selection


def dense_free_weights(
    model: torch.nn.Module, stored: Mapping[str, tuple[str, int, int]], standalone: frozenset[str]
) -> dict[str, tuple[int, int]]:
    """Checkpoint name -> (rows, cols) of the weights `model` may load without their dense copy: those of a
    linear (a module with `linear_kernel`) all of whose weight parts are stored (`stored`: name -> (format,
    rows, cols)) in a format of `standalone`."""
    if not standalone or not hasattr(model, "checkpoint_target"):
        return {}
    modules = dict(model.named_modules())
    parts: dict[str, list[str]] = {}  # module -> its weight's checkpoint tensors
    for name in stored:
        if model.skip_weight(name) or name == getattr(model, "embed_param", None):
            continue
        target, _ = model.checkpoint_target(name)
        module_name, _, param = target.rpartition(".")
        if param == "weight":
            parts.setdefault(module_name, []).append(name)
    free = {}
    for module_name, names in parts.items():
        module = modules.get(module_name)
        if module is None or not hasattr(module, "linear_kernel"):
            continue
        if all(stored[name][0] in standalone for name in names):
            free.update({name: stored[name][1:] for name in names})
    return free


def skipping(select: WeightSelector | None, names: Iterable[str]) -> WeightSelector | None:
    """`select`, also skipping `names` (read as placeholders instead: `with_placeholders`)."""
    names = frozenset(names)
    if not names:
        return select
    return lambda name: False if name in names else (True if select is None else select(name))


def with_placeholders(
    weights: Iterable[tuple[str, torch.Tensor]],
    shapes: Mapping[str, tuple[int, int]],
    select: WeightSelector | None,
) -> Iterator[tuple[str, torch.Tensor]]:
    """`weights`, then a meta tensor of each of `shapes` that `select` reads whole."""
    yield from weights
    for name, shape in shapes.items():
        spec = selection(select, name)
        if spec is SKIP:
            continue
        if spec is not None:
            raise UnsupportedError(f"{name}: a slice of a weight loaded without its dense copy")
        yield name, torch.empty(shape, device="meta")


def check_dense_free_linears(model: torch.nn.Module) -> None:
    """After the quantized kernels are attached: every linear without a dense weight has one (a linear
    loaded without its dense copy that got no kernel over its blocks would fail at its first product)."""
    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        if not hasattr(module, "linear_kernel") or weight is None or not weight.is_meta:
            continue
        if getattr(module, "quant_format", None) is None:
            raise UnsupportedError(
                f"{name}: loaded without its dense weight (its blocks' kernel takes every row count) but "
                "given no quantized kernel"
            )
