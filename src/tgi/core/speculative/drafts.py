"""Who guesses each sequence's next tokens before a step (no torch here): the request's own prediction where
it gave one (OpenAI's `prediction`, `tgi.core.speculative.prediction`), else the launch's proposer
(`--speculate`: n-grams, a draft model, Medusa heads), else nobody.

A request with a prediction is guessed for by it alone, whatever the launch's proposer: its guesses are the
better ones for it, and its usage's accepted and rejected counts are then the prediction's. The verification
is the same for both (`tgi.core.speculative.proposer`): the output is what plain decoding gives.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from collections.abc import Sequence as Tokens

from tgi.core.interfaces.batch import PENDING_TOKEN, ScheduledBatch
from tgi.core.sequence import Sequence
from tgi.core.speculative.prediction import PredictionProposer
from tgi.core.speculative.proposer import Proposer

#: the most guesses a prediction makes per step (the walk makes fewer until the output has followed it for a
#: while: `tgi.core.speculative.prediction`). A step's cost grows with its positions, less than a token's each:
#: on the default model on a 2-core CPU, ~30 ms for a decode, 61 for 1 + 16 positions, 77 for 1 + 32
#: (src/tgi/benchmarks/README.md, "Predicted Outputs").
PREDICTION_DRAFT_TOKENS = 32


class Drafts:
    """Each step's guesses (`propose`), from the request's prediction or the launch's `proposer`."""

    def __init__(self, proposer: Proposer | None, speculate: int) -> None:
        self.proposer = proposer  # the launch's (`--speculate`); None without it
        self.speculate = speculate  # the launch's proposer's guesses per step
        self.predictions = PredictionProposer()

    @property
    def active(self) -> bool:
        """Whether any sequence may be guessed for (the launch speculates, or a request predicts)."""
        return self.proposer is not None or len(self.predictions) > 0

    def start_prediction(self, request_id: str, num_prompt_tokens: int, prediction: Tokens[int]) -> None:
        """Guess for this request from `prediction` (token ids of the output it expects)."""
        self.predictions.start(request_id, num_prompt_tokens, prediction)

    def drop(self, request_id: str) -> None:
        """Forget a finished or cancelled request's guesses."""
        self.predictions.drop(request_id)
        if self.proposer is not None:
            self.proposer.drop(request_id)

    def predicted_counts(self, seq: Sequence, num_output_tokens: int) -> tuple[int, int] | None:
        """A request's (accepted, rejected) prediction tokens once its output is `num_output_tokens` long
        (tokens a step accepted past a stop are not its output): the prediction's tokens the output said, and
        those its verification refused; None without a prediction."""
        output_end = seq.num_prompt_tokens + num_output_tokens
        walk = self.predictions.walked(seq.request_id, seq.token_ids[:output_end])
        return None if walk is None else (walk.accepted, seq.num_rejected_drafts)

    def follows_tokens(self, batch: ScheduledBatch) -> bool:
        """Whether a sequence `batch` samples guesses from a prediction: its next guesses follow the token this
        step draws, so the step after it cannot be scheduled before that token is on the host."""
        return any(s.sample and s.request_id in self.predictions for s in batch.sequences)

    def propose(self, running: Iterable[Sequence], guided: Container[str]) -> None:
        """Set `draft_token_ids` of every running sequence about to decode: none under a grammar (its mask
        follows each token), none while its last guesses' failures hold it back (`spec_wait`), never more than
        its remaining `max_new_tokens` allow, less the token verification adds."""
        asks: list[tuple[str, list[int], int]] = []
        waiting: list[Sequence] = []
        for seq in running:
            seq.draft_token_ids = []
            predicted = seq.request_id in self.predictions
            if not (predicted or self.proposer is not None):
                continue
            if not seq.is_decode or seq.request_id in guided or seq.token_ids[-1] == PENDING_TOKEN:
                continue
            if seq.spec_wait > 0:  # its last guesses all failed: a few plain decodes first
                seq.spec_wait -= 1
                continue
            k = PREDICTION_DRAFT_TOKENS if predicted else self.speculate
            room = min(k, seq.params.max_new_tokens - seq.num_output_tokens - 1)
            if room <= 0:
                continue
            if predicted:
                seq.draft_token_ids = self.predictions.propose(seq.request_id, seq.token_ids, room)
            else:
                asks.append((seq.request_id, seq.token_ids, room))
                waiting.append(seq)
        if asks:
            for seq, guesses in zip(waiting, self.proposer.propose_batch(asks), strict=True):
                seq.draft_token_ids = guesses
