"""Logits processors as plugins (vLLM's custom logits processors, by name): the contract a processor meets
(`LogitsProcessor`), and how core's sampler applies the ones each row selects (`apply_logits_processors`).

A plugin package names each processor in the entry-point group ``tgi.logits_processors`` (found by
`tgi.core.plugins.logits_processors`), for example in its ``pyproject.toml``::

    [project.entry-points."tgi.logits_processors"]
    no_digits = "my_package.processors:NoDigits"

The operator enables processors by name at launch (``--logits-processors no_digits``); a request selects
some by name, with arguments (`SamplingParams.logits_processors`). They run after the masks and the logit
bias, before the penalties (`tgi.core.interfaces.sampling`, step 0c), in greedy and sampled rows alike.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from tgi.core.torch.host_transfer import to_device

if TYPE_CHECKING:
    from tgi.core.interfaces.batch import ScheduledSequence


@dataclass(frozen=True)
class ProcessorRow:
    """What a processor is told of one row besides its logits."""

    prompt_token_ids: Sequence[int]  # the request's prompt
    output_token_ids: Sequence[int]  # the tokens generated so far (before the one being sampled)
    args: Mapping[str, Any]  # the request's arguments for this processor (`validate_args` accepted them)


class LogitsProcessor(ABC):
    """A logits processor: next-token logits in, next-token logits out, for the rows that selected it.

    Contract:

    * `apply(logits, rows)` gets `logits` `[R, V]` float32 on the sampler's device, the logits of the R rows
      that selected this processor (after the masks, the logit bias and any processor a row selected before
      this one), and `rows[i]` for row i; it returns a `[R, V]` tensor of the same dtype and device (it may
      modify `logits` in place and return it). Set a token to -inf to forbid it; a row must keep at least
      one finite logit.
    * It is a function of what it is given: the same logits, tokens and arguments give the same output, in
      whatever batch and order, at every step (the engine may sample a position twice, or speculate).
      Keep no state between calls; the sampler's thread calls it, one call at a time.
    * `validate_args(args)` is called once per request, when the request is validated (off the sampler's
      thread): raise `ValueError` with a message for the client (the server answers 422) when the
      arguments are not ones `apply` can take. By default only no arguments are accepted.

    The entry point's object is a subclass (constructed with no arguments) or any callable with no
    arguments that returns an instance; it is loaded once per process when the operator enables its name.
    """

    def validate_args(self, args: Mapping[str, Any]) -> None:
        """Raise `ValueError` when `args` are not arguments this processor takes (default: none)."""
        if args:
            raise ValueError(f"takes no arguments, got {', '.join(sorted(args))}")

    @abstractmethod
    def apply(self, logits: torch.Tensor, rows: Sequence[ProcessorRow]) -> torch.Tensor:
        """The new logits `[R, V]` of the R rows (see the class docstring)."""


def apply_logits_processors(
    logits: torch.Tensor, rows: Sequence[ScheduledSequence], lookup: Callable[[str], LogitsProcessor]
) -> torch.Tensor:
    """Apply each row's selected processors, in the row's order, to its row of `logits` `[N, V]` (in place):
    round j calls each processor once with the rows whose j-th choice it is. `lookup(name)` gives the
    processor of an enabled name."""
    depth = max(len(r.sampling.logits_processors) for r in rows)
    for j in range(depth):
        groups: dict[str, list[int]] = {}
        for i, r in enumerate(rows):
            chosen = r.sampling.logits_processors
            if j < len(chosen):
                groups.setdefault(chosen[j].name, []).append(i)
        for name, members in groups.items():
            index = to_device(members, torch.int64, logits.device)
            told = [
                ProcessorRow(
                    rows[i].all_token_ids[: rows[i].num_prompt_tokens],
                    rows[i].all_token_ids[rows[i].num_prompt_tokens :],
                    rows[i].sampling.logits_processors[j].args,
                )
                for i in members
            ]
            out = lookup(name).apply(logits.index_select(0, index), told)
            if out.shape != (len(members), logits.shape[1]):
                raise RuntimeError(
                    f"logits processor {name!r} returned {tuple(out.shape)} for {len(members)} rows of "
                    f"{logits.shape[1]} logits"
                )
            logits.index_copy_(0, index, out.to(logits.dtype))
    return logits
