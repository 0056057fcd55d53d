"""vLLM's `allowed_token_ids` and `bad_words` on torch logits (`tgi.core.interfaces.sampling`, step 0).

A request's allowed ids never change while it runs: their device tensor is built the first time its
`SamplingParams` is sampled and kept while that object lives (as `LogitBiasTable` keeps the bias), so a
long list is copied to the device once, not at every step. Bad words depend on the last tokens generated:
`tgi.core.sampling.bad_words` finds the tokens each row may not take now, one scatter masks them all.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from tgi.core.sampling.bad_words import banned_tokens
from tgi.core.sampling_params import SamplingParams
from tgi.core.torch.host_transfer import to_device

if TYPE_CHECKING:
    from tgi.core.interfaces.batch import ScheduledSequence


class AllowedTokensTable:
    """Each live request's `allowed_token_ids` as a `[K]` int64 device tensor, keyed by its `SamplingParams`
    object (on one thread: the sampler's)."""

    def __init__(self) -> None:
        self._ids: dict[int, tuple[weakref.ref, torch.Tensor]] = {}
        self.num_built = 0  # tensors built since start (one per request and device)

    def __len__(self) -> int:
        return len(self._ids)

    def ids(self, params: SamplingParams, device: torch.device) -> torch.Tensor:
        key = id(params)
        entry = self._ids.get(key)
        if entry is None or entry[0]() is not params or entry[1].device != device:
            ids = to_device(params.allowed_token_ids, torch.int64, device)
            entry = (weakref.ref(params, self._forget(key)), ids)
            self._ids[key] = entry
            self.num_built += 1
        return entry[1]

    def _forget(self, key: int):
        def forget(ref: weakref.ref) -> None:
            entry = self._ids.get(key)
            if entry is not None and entry[0] is ref:  # not a newer object that took the same id
                self._ids.pop(key, None)

        return forget

    def apply(self, logits: torch.Tensor, params: Sequence[SamplingParams]) -> torch.Tensor:
        """Set to -inf every token of row i not in `params[i].allowed_token_ids` (rows with None: untouched),
        with one scatter over all rows. In place."""
        device = logits.device
        rows = [i for i, p in enumerate(params) if p.allowed_token_ids is not None]
        ids = [self.ids(params[i], device) for i in rows]
        counts = to_device([len(t) for t in ids], torch.int64, device)
        total = sum(len(t) for t in ids)  # given, so that a GPU need not wait to learn the output's size
        at_rows = to_device(rows, torch.int64, device).repeat_interleave(counts, output_size=total)
        keep = torch.zeros(logits.shape, dtype=torch.bool, device=device)
        keep.index_put_((at_rows, torch.cat(ids)), torch.tensor(True, device=device))
        keep |= to_device([p.allowed_token_ids is None for p in params], torch.bool, device)[:, None]
        return logits.masked_fill_(~keep, float("-inf"))


def apply_bad_words(logits: torch.Tensor, rows: Sequence[ScheduledSequence]) -> torch.Tensor:
    """Set to -inf, in each row, the tokens that would complete one of its `bad_words_ids` now. In place."""
    at_rows, at_tokens = [], []
    for i, r in enumerate(rows):
        if r.sampling.bad_words_ids:
            banned = banned_tokens(r.sampling.bad_words_ids, r.all_token_ids[r.num_prompt_tokens :])
            at_rows += [i] * len(banned)
            at_tokens += sorted(banned)
    if at_rows:
        index = (
            to_device(at_rows, torch.int64, logits.device),
            to_device(at_tokens, torch.int64, logits.device),
        )
        logits.index_put_(index, torch.tensor(float("-inf"), dtype=logits.dtype, device=logits.device))
    return logits
