"""Who guesses for whom before a step (`tgi.core.speculative.drafts`), on a real scheduler without a model:
a request's prediction for it alone, the launch's proposer for the others, nobody under a grammar."""

from __future__ import annotations

from tgi.core.block_manager import BlockManager
from tgi.core.interfaces.batch import StepOutput
from tgi.core.sampling_params import SamplingParams
from tgi.core.scheduler import Scheduler
from tgi.core.sequence import Sequence
from tgi.core.speculative import NgramProposer
from tgi.core.speculative.drafts import Drafts
from tgi.core.speculative.prediction import MIN_GUESSES

PROMPT = [1, 2, 3, 1, 2]  # "1 2" repeats: the n-gram proposer guesses "3 1 2" after it


def _decoding(scheduler: Scheduler, ids: list[str], max_new_tokens: int = 64) -> list[Sequence]:
    """Sequences that have drawn their first token (2, after the prompt) and decode next."""
    seqs = [Sequence(i, PROMPT, SamplingParams(max_new_tokens=max_new_tokens), seed=1) for i in ids]
    for seq in seqs:
        scheduler.add(seq)
    batch = scheduler.schedule()
    scheduler.update(batch, StepOutput(ids, [3] * len(ids), [0.0] * len(ids)))
    assert all(seq.is_decode for seq in seqs)
    return seqs


def test_a_prediction_guesses_for_its_request_and_the_launch_proposer_for_the_others():
    scheduler = Scheduler(BlockManager(64, 4), 8, 256)
    predicted, plain, guided = _decoding(scheduler, ["predicted", "plain", "guided"])
    drafts = Drafts(NgramProposer(), speculate=2)
    prediction = [3, *range(100, 140)]  # its first token is the one already drawn
    drafts.start_prediction("predicted", len(PROMPT), prediction)
    drafts.propose(scheduler.running, guided={"guided"})
    assert predicted.draft_token_ids == prediction[1 : 1 + MIN_GUESSES]  # followed for 1 token: a few
    assert plain.draft_token_ids == [1, 2]  # n-grams: what followed "3" before, `speculate` tokens
    assert guided.draft_token_ids == []


def test_without_a_launch_proposer_only_predictions_guess_and_never_past_max_new_tokens():
    scheduler = Scheduler(BlockManager(64, 4), 8, 256)
    predicted, plain = _decoding(scheduler, ["predicted", "plain"], max_new_tokens=5)
    drafts = Drafts(None, speculate=0)
    assert not drafts.active
    drafts.start_prediction("predicted", len(PROMPT), [3, 4, 5, 6, 7, 8, 9])
    assert drafts.active
    drafts.propose(scheduler.running, guided=set())
    # 1 token drawn, 5 allowed: 3 guesses leave room for the token their verification draws
    assert predicted.draft_token_ids == [4, 5, 6] and plain.draft_token_ids == []
    drafts.drop("predicted")
    assert not drafts.active


def test_counts_are_the_walks_accepted_tokens_and_the_guesses_refused():
    scheduler = Scheduler(BlockManager(64, 4), 8, 256)
    [seq] = _decoding(scheduler, ["r"])
    drafts = Drafts(None, speculate=0)
    drafts.start_prediction("r", len(PROMPT), [3, 4, 5, 6, 7])
    drafts.propose(scheduler.running, guided=set())
    assert seq.draft_token_ids == [4, 5, 6, 7]
    batch = scheduler.schedule()
    assert drafts.follows_tokens(batch)  # its next guesses need this step's tokens
    # the model draws 4, 5, then 9 where the prediction says 6: two guesses kept, two refused
    scheduler.update(batch, StepOutput(["r"] * 5, [4, 5, 9, 1, 1], [0.0] * 5))
    assert seq.output_token_ids == [3, 4, 5, 9]
    assert drafts.predicted_counts(seq, seq.num_output_tokens) == (3, 2)
    assert Drafts(None, 0).predicted_counts(seq, 4) is None  # no prediction, no counts
