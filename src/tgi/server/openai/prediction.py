"""OpenAI's Predicted Outputs on chat completions: `prediction` read and tokenized, and its usage counts.

`{"type": "content", "content": text or text parts}` is the output the client expects (a file it asks to
have edited). The engine verifies its tokens as speculative decoding's guesses, so it speeds the answer up
where the answer follows it and never changes the answer (`tgi.core.speculative.prediction`). Usage's
`completion_tokens_details` then counts `accepted_prediction_tokens` (the prediction's tokens the answer said)
and `rejected_prediction_tokens` (those fed to the model and refused: what the prediction cost).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from tgi.core.request import TokenEvent
from tgi.server.validation.fields import RequestModel

if TYPE_CHECKING:
    from tgi.server.service.inference import InferenceService


class PredictionPart(RequestModel):
    """A text part of a prediction's `content` (OpenAI allows text parts only)."""

    type: str
    text: str = ""

    def refusals(self) -> Iterator[tuple[str, str]]:
        if self.type != "text":
            yield "type", "must be `text`: a prediction's content holds text parts only"


class Prediction(RequestModel):
    """OpenAI's `prediction`: only `type: "content"` is defined."""

    type: str
    content: str | list[PredictionPart]

    def refusals(self) -> Iterator[tuple[str, str]]:
        if self.type != "content":
            yield "type", "must be `content`, the one type of prediction"

    @property
    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


async def prediction_tokens(service: InferenceService, prediction: Prediction | None) -> tuple[int, ...]:
    """The prediction's text as the model's tokens (no special tokens: it is output, not a prompt)."""
    if prediction is None or not prediction.text:
        return ()
    return tuple(await service.encode(prediction.text, add_special_tokens=False))


def prediction_counts(event: TokenEvent) -> tuple[int, int]:
    """A choice's (accepted, rejected) prediction tokens, from its last event."""
    return event.num_accepted_prediction_tokens, event.num_rejected_prediction_tokens


def prediction_usage(counts: Iterable[tuple[int, int]]) -> dict[str, int]:
    """`completion_tokens_details`' two counts over the choices."""
    pairs = list(counts)
    return {
        "accepted_prediction_tokens": sum(a for a, _ in pairs),
        "rejected_prediction_tokens": sum(r for _, r in pairs),
    }
