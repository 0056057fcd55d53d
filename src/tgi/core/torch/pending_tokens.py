"""The tokens a runner sampled in its last step, kept on the device (overlapped steps): a decode fed
`PENDING_TOKEN` takes its request's token from there, without the token ever crossing to the host first."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tgi.core.interfaces.batch import PENDING_TOKEN, ScheduledSequence
from tgi.core.torch.host_transfer import to_device


class LastSampled:
    """What `remember` was last given: each sampled row's token id (a device tensor) and the request of each
    row; `fill` puts them where a step's input ids hold `PENDING_TOKEN`."""

    def __init__(self) -> None:
        self._token_ids: torch.Tensor | None = None
        self._rows: dict[str, int] = {}

    def remember(self, request_ids: Sequence[str], token_ids: torch.Tensor) -> None:
        """The step's sampled rows, in order (a request's last row wins: the token after its guesses)."""
        self._token_ids = token_ids
        self._rows = {request_id: row for row, request_id in enumerate(request_ids)}

    def fill(self, seqs: Sequence[ScheduledSequence], input_ids: torch.Tensor) -> None:
        """Replace, in place, each sequence's last input id that is `PENDING_TOKEN` with the token its
        request was sampled in the step `remember` saw (device ops only: no wait for the device).
        `RuntimeError` naming the request when that step sampled none for it."""
        at, rows, offset = [], [], 0
        for s in seqs:
            offset += len(s.token_ids)
            if s.token_ids and s.token_ids[-1] == PENDING_TOKEN:
                row = self._rows.get(s.request_id)
                if row is None or self._token_ids is None:
                    raise RuntimeError(
                        f"{s.request_id}: fed the token still on the device, but the runner's last step "
                        "sampled none for it (overlapped steps must follow one another)"
                    )
                at.append(offset - 1)
                rows.append(row)
        if at:
            where = to_device([at, rows], torch.int64, input_ids.device)  # one copy: positions, sampled rows
            picked = self._token_ids.index_select(0, where[1])
            input_ids.index_copy_(0, where[0], picked.to(input_ids.dtype))
