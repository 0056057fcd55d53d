"""Reading a step's output rows: which rows are whose (`rows_by_request`), how many guesses a request drew
as they were guessed (`accepted_drafts`), and the error a scheduler raises when the rows do not fit its batch."""

from __future__ import annotations

from tgi.core.interfaces.batch import StepOutput


class SchedulerError(RuntimeError):
    """The scheduler cannot make progress (a request larger than the KV cache); the engine refuses such
    requests up front, so this means a sizing bug."""


def accepted_drafts(drafts: list[int], drawn: list[int]) -> int:
    """How many leading guesses equal the tokens the request drew at their positions. The draw at each
    position is the request's own (its seed and step, the guesses before it as history), so the kept
    tokens are exactly those decoding one token at a time would give: greedy and sampled requests alike."""
    accepted = 0
    for guess, token in zip(drafts, drawn, strict=False):
        if guess != token:
            break
        accepted += 1
    return accepted


def rows_by_request(output: StepOutput) -> dict[str, range]:
    """The rows of `output` each request's tokens are in (one per sampled position, consecutive);
    `SchedulerError` when a request's rows are not consecutive."""
    if len(output.request_ids) != len(output.token_ids):
        raise SchedulerError(
            f"the runner returned {len(output.token_ids)} tokens for {len(output.request_ids)} rows"
        )
    rows: dict[str, range] = {}
    for i, request_id in enumerate(output.request_ids):
        first = rows.get(request_id)
        if first is None:
            rows[request_id] = range(i, i + 1)
        elif first.stop == i:
            rows[request_id] = range(first.start, i + 1)
        else:
            raise SchedulerError(
                f"{request_id}: the runner returned its sampled rows apart ({first.stop - 1}, {i})"
            )
    return rows
