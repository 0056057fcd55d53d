"""The walk of an output along its prediction (OpenAI's Predicted Outputs), without a model: the guesses it
makes, where it re-joins after an edit, and what it counts as accepted."""

from __future__ import annotations

import random

from tgi.core.speculative.prediction import MIN_GUESSES, NEAR, PredictedOutput, PredictionProposer

PROMPT = [900, 901, 902]


def walk(prediction: list[int], output: list[int], **sizes) -> PredictedOutput:
    w = PredictedOutput(prediction, **sizes)
    w.follow(output)
    return w


def test_an_output_that_follows_its_prediction_is_guessed_ahead_and_every_token_accepted():
    prediction = list(range(10, 30))
    w = walk(prediction, [])
    assert w.guesses(4) == [10, 11, 12, 13]  # before any output: the prediction's start
    w.follow([10, 11, 12])
    assert w.guesses(4) == [13, 14, 15, 16] and w.accepted == 3
    w.follow(prediction)
    assert w.guesses(4) == [] and w.accepted == len(prediction)  # at its end: nothing left to guess


def test_a_replaced_word_rejoins_right_after_it_at_the_first_shared_token():
    # "count = 0 ; count += 1 ; return count" with `count` (7) renamed to `total` (8)
    count, total, eq, zero, semi, plus, one, ret = 7, 8, 1, 0, 2, 3, 4, 5
    prediction = [count, eq, zero, semi, count, plus, one, semi, ret, count]
    w = walk(prediction, [total])
    assert w.cursor is None and w.guesses(4) == []  # left at the first token: no guesses
    w.follow([total, eq])
    # `=` occurs once: re-joined after it, guessing the rest of the line and the next
    assert w.guesses(3) == [zero, semi, count]
    w.follow([total, eq, zero, semi, total])
    assert w.guesses(2) == []
    w.follow([total, eq, zero, semi, total, plus])
    assert w.guesses(3) == [one, semi, ret]
    w.follow([total, eq, zero, semi, total, plus, one, semi, ret, total])
    assert w.accepted == len(prediction) - 3  # every token but the three renamed ones


def test_a_common_token_rejoins_at_the_edit_not_at_the_last_place_it_occurs():
    nl = 0
    lines = [[10, 11, nl], [20, 21, nl], [30, 31, nl], [40, 41, nl]]
    prediction = [t for line in lines for t in line]
    # the second line is replaced by 25, 26 then the newline: the newline occurs 4 times in the prediction
    w = walk(prediction, [10, 11, nl, 25, 26, nl])
    assert w.guesses(3) == [30, 31, nl]  # the third line: after the edit, not after the last newline


def test_a_rejoin_near_the_edit_is_preferred_to_a_match_elsewhere():
    far = list(range(100, 100 + NEAR + 10))
    prediction = [1, 2, 3, 4, 5, 6, *far, 9, 7, 7]
    w = walk(prediction, [1, 2, 9])  # 3 replaced by 9, which the prediction holds far ahead
    assert w.cursor is None  # not taken: the edit may go on a few tokens
    w.follow([1, 2, 9, 4])
    assert w.guesses(2) == [5, 6]


def test_away_from_the_edit_the_longest_ngram_said_since_is_taken():
    far = list(range(100, 100 + NEAR + 4))
    prediction = [1, 2, 3, *far, 4, 5, 6, 3, 4, 5, 7]  # a passage deleted: (4, 5) twice, (3, 4, 5) once
    w = walk(prediction, [1, 2, 3, 4, 5])  # (4) and (4, 5) start past NEAR: not near
    assert w.cursor is None  # two tokens off the prediction: not yet
    w.follow([1, 2, 3, 4, 5, 6, 3, 4, 5])  # (4, 5, 6, 3), said since it left: found after the deletion
    assert w.guesses(1) == [7]


def test_with_nothing_after_the_edit_the_last_place_before_it_is_taken():
    prediction = [4, 5, 6, 7, 8, 9]
    w = walk(prediction, [4, 5, 6, 7, 8, 9, 4, 5, 6, 7])  # the output repeats past the prediction's end
    assert w.guesses(3) == [8, 9]


def test_a_deleted_passage_rejoins_after_it():
    prediction = [1, 2, 3, 4, 5, 6, 7, 8]
    w = walk(prediction, [1, 2, 6])  # 3, 4, 5 deleted
    assert w.guesses(2) == [7, 8]
    w.follow([1, 2, 6, 7, 8])
    assert w.accepted == 5  # the positions said: 1, 2, 6, 7, 8


def test_an_inserted_passage_rejoins_after_it():
    prediction = [1, 2, 3, 4]
    w = walk(prediction, [1, 50, 51, 52])
    assert w.cursor is None
    w.follow([1, 50, 51, 52, 2])
    assert w.guesses(2) == [3, 4]


def test_guesses_grow_with_the_run_the_output_follows_and_a_near_rejoin_keeps_it():
    prediction = list(range(1000, 1200))
    w = walk(prediction, [])
    assert len(w.guesses(32)) == MIN_GUESSES  # nothing followed yet: a few
    w.follow(prediction[:3])
    assert len(w.guesses(32)) == MIN_GUESSES + 2  # twice the run
    w.follow(prediction[:40])
    assert len(w.guesses(32)) == 32 and len(w.guesses(5)) == 5  # the engine's cap
    # a word replaced: two tokens of its own, then the prediction again one token further
    output = [*prediction[:40], 7, 8, *prediction[41:43]]
    w.follow(output)
    assert w.cursor == 43 and len(w.guesses(32)) == 32  # half the run of 40, and more: still trusted
    for _ in range(4):  # an output that keeps leaving it: a token replaced after each one it says
        output += [7, prediction[w.cursor + 1]]
        w.follow(output)
    assert len(w.guesses(32)) == MIN_GUESSES  # its run halved at each leaving: a few


def test_a_rejoin_far_from_the_edit_starts_a_new_run():
    prediction = list(range(1000, 1200))
    w = walk(prediction, prediction[:20])
    far = 20 + NEAR + 10
    w.follow([*prediction[:20], 7, 8, 9, prediction[far]])  # left, then a token found far ahead
    assert w.cursor == far + 1 and len(w.guesses(32)) == MIN_GUESSES  # a run of 1: a few
    w = walk(prediction, [*prediction[:20], 7, 8, 9, prediction[5]])  # found behind the edit
    assert w.cursor == 6 and len(w.guesses(32)) == MIN_GUESSES


def test_accepted_counts_each_prediction_position_once_and_never_exceeds_it():
    prediction = [1, 2, 3]
    w = walk(prediction, [1, 2, 3, 1, 2, 3, 1, 2, 3])  # said three times over
    assert w.accepted == 3


def test_a_walk_fed_in_steps_equals_one_fed_at_once():
    rng = random.Random(0)
    for _ in range(50):
        prediction = [rng.randrange(8) for _ in range(rng.randrange(0, 40))]
        output = [rng.randrange(8) for _ in range(rng.randrange(0, 40))]
        whole = walk(prediction, output)
        stepped = PredictedOutput(prediction)
        i = 0
        while i < len(output):
            i += rng.randrange(1, 5)  # a step appends 1 token, or several when guesses were accepted
            stepped.follow(output[:i])
        assert (stepped.cursor, stepped.accepted, stepped.guesses(5)) == (
            whole.cursor,
            whole.accepted,
            whole.guesses(5),
        )


def test_every_guess_is_the_prediction_after_a_place_the_output_just_said():
    """Whatever the output, a guess continues the prediction right after an n-gram the output ends with."""
    rng = random.Random(1)
    for _ in range(200):
        prediction = [rng.randrange(6) for _ in range(rng.randrange(1, 30))]
        output = [rng.randrange(6) for _ in range(rng.randrange(1, 30))]
        w = walk(prediction, output)
        guesses = w.guesses(4)
        if guesses:
            at = w.cursor
            assert at >= 1 and prediction[at - 1] == output[-1] and guesses == prediction[at : at + 4]


def test_the_proposer_walks_the_output_after_the_prompt_and_forgets_dropped_requests():
    proposer = PredictionProposer()
    proposer.start("r", len(PROMPT), [5, 6, 7, 8])
    assert "r" in proposer and len(proposer) == 1
    assert proposer.propose("r", PROMPT, 2) == [5, 6]  # the prompt is never walked
    assert proposer.propose("r", [*PROMPT, 5, 6], 5) == [7, 8]
    assert proposer.walked("r", [*PROMPT, 5, 6, 7]).accepted == 3
    assert proposer.propose("other", [*PROMPT, 5], 2) == [] and proposer.walked("other", PROMPT) is None
    proposer.drop("r")
    assert "r" not in proposer and proposer.propose("r", [*PROMPT, 5], 2) == []
