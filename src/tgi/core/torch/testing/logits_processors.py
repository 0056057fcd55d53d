"""The testing logits processors on torch tensors (their plain-Python twins and the cases that select them:
`tgi.core.testing.extended_sampling_cases`), registered in a process's registry by
`register_testing_processors` so that any torch sampler finds them by name."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from tgi.core.plugins.logits_processors import LogitsProcessorRegistry, logits_processors
from tgi.core.sampling.logits_processor import LogitsProcessor, ProcessorRow
from tgi.core.testing.extended_sampling_cases import BAN_PROCESSOR, BOOST_PROCESSOR


class BanTokens(LogitsProcessor):
    """`args["token_ids"]` become -inf."""

    def validate_args(self, args: Mapping[str, Any]) -> None:
        ids = args.get("token_ids")
        if (
            set(args) != {"token_ids"}
            or not isinstance(ids, list)
            or not all(isinstance(t, int) for t in ids)
        ):
            raise ValueError("takes `token_ids`, a list of token ids")

    def apply(self, logits: torch.Tensor, rows: Sequence[ProcessorRow]) -> torch.Tensor:
        for i, row in enumerate(rows):
            logits[i, row.args["token_ids"]] = float("-inf")
        return logits


class BoostLastToken(LogitsProcessor):
    """The last token of the row's history (its output's, else its prompt's) gains `args["amount"]` (5)."""

    def validate_args(self, args: Mapping[str, Any]) -> None:
        if set(args) - {"amount"} or not isinstance(args.get("amount", 5.0), (int, float)):
            raise ValueError("takes `amount`, a number")

    def apply(self, logits: torch.Tensor, rows: Sequence[ProcessorRow]) -> torch.Tensor:
        for i, row in enumerate(rows):
            last = (row.output_token_ids or row.prompt_token_ids)[-1]
            logits[i, last] += float(row.args.get("amount", 5.0))
        return logits


TESTING_PROCESSORS = {BAN_PROCESSOR: BanTokens(), BOOST_PROCESSOR: BoostLastToken()}


def register_testing_processors(registry: LogitsProcessorRegistry | None = None) -> LogitsProcessorRegistry:
    """Register the testing processors in `registry` (default: this process's); returns it."""
    registry = registry if registry is not None else logits_processors()
    for name, processor in TESTING_PROCESSORS.items():
        registry.register(name, processor)
    return registry
