"""`--deterministic` with speculative decoding (`--speculate 3`, n-gram guesses) on the CPU backend, through
`LLMEngine` on a tiny random Llama (and with a draft model's and Medusa heads' guesses, and with a request's
own prediction): a verification step scores each sequence's guesses as decode rows (one
query per fed token, its own context length), so the batch-invariant kernels make a guessed position's
logits the bits a plain decode step gives it. A greedy and a seeded sampled request give the same token ids
alone, beside 3 other requests that speculate too, and with speculation off."""

from __future__ import annotations

import pytest
from medusa_heads import write_medusa

from tgi.backends.cpu import native
from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.sampling_params import SamplingParams
from tgi.core.testing.model import write_tiny_llama

pytestmark = pytest.mark.skipif(
    not native.compiler_found(), reason="no C++ compiler to build the native kernels"
)

NEW_TOKENS = 12
GREEDY = SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True)
SEEDED = SamplingParams(
    max_new_tokens=NEW_TOKENS, ignore_eos=True, do_sample=True, seed=7, temperature=0.7, top_k=20
)
# repeated runs, so that the n-gram proposer has something to guess
TARGET = [11, 12, 13, 14, 15] * 5 + [11, 12, 13]
OTHERS = [[40, 41, 42, 40, 41, 42, 40, 41], [5, 17, 99, 4, 250, 8, 31] * 3, [9, 8, 7]]


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    return write_tiny_llama(tmp_path_factory.mktemp("spec") / "llama")


@pytest.fixture(scope="module")
def want(tiny_llama) -> list[list[int]]:
    """The greedy and the seeded request's tokens alone with speculation off (one engine for the module)."""
    plain = _engine(tiny_llama, 0)
    return [plain.generate([TARGET], p)[0].token_ids for p in (GREEDY, SEEDED)]


def _engine(path, speculate: int, speculative_model: str | None = None) -> LLMEngine:
    config = EngineConfig(
        model_id=str(path), backend="cpu", dtype="bfloat16", deterministic=True, speculate=speculate,
        max_total_tokens=128, max_batch_total_tokens=1024, max_batch_prefill_tokens=16, max_num_seqs=8,
        speculative_model=speculative_model,
    )  # fmt: skip
    return LLMEngine.from_config(config)


def test_speculation_keeps_the_tokens_batch_invariant(tiny_llama, want):
    engine = _engine(tiny_llama, 3)
    alone = [engine.generate([TARGET], p)[0].token_ids for p in (GREEDY, SEEDED)]
    assert engine.scheduler.num_draft_tokens > 0, "nothing was guessed: no verification step ran"
    assert alone == want, "with speculation, alone"
    results = engine.generate([*OTHERS, TARGET, TARGET], [GREEDY] * len(OTHERS) + [GREEDY, SEEDED])
    assert [r.token_ids for r in results[-2:]] == want, "with speculation, beside 3 other requests"


def test_a_draft_models_guesses_keep_the_tokens_batch_invariant(tiny_llama, tmp_path_factory, want):
    """Whatever proposes the guesses (here a draft model, whose own steps are batched as the target's are),
    the accepted tokens are the target's: the verification rows decide them, so the tokens are plain decoding's."""
    draft = write_tiny_llama(tmp_path_factory.mktemp("draft") / "llama", seed=1)
    engine = _engine(tiny_llama, 3, speculative_model=str(draft))
    alone = [engine.generate([TARGET], p)[0].token_ids for p in (GREEDY, SEEDED)]
    assert engine.scheduler.num_draft_tokens > 0, "nothing was guessed: no verification step ran"
    assert alone == want, "with a draft model, alone"
    results = engine.generate([*OTHERS, TARGET, TARGET], [GREEDY] * len(OTHERS) + [GREEDY, SEEDED])
    assert [r.token_ids for r in results[-2:]] == want, "with a draft model, beside 3 other requests"


def test_medusa_heads_keep_the_tokens_batch_invariant(tiny_llama, tmp_path, want):
    """Medusa heads guess from the target's last hidden state; the verification rows decide the tokens."""
    write_medusa(tmp_path / "medusa", tiny_llama, own_projection=True)
    engine = _engine(tmp_path / "medusa", 2)
    assert engine.runner.capabilities().medusa_heads > 0
    alone = [engine.generate([TARGET], p)[0].token_ids for p in (GREEDY, SEEDED)]
    assert engine.scheduler.num_draft_tokens > 0, "nothing was guessed: no verification step ran"
    assert alone == want, "with Medusa heads, alone"
    results = engine.generate([*OTHERS, TARGET, TARGET], [GREEDY] * len(OTHERS) + [GREEDY, SEEDED])
    assert [r.token_ids for r in results[-2:]] == want, "with Medusa heads, beside 3 other requests"


def _predicted(engine: LLMEngine, prompts, params, predictions) -> list:
    """Each prompt's events, its request predicting `predictions[i]` (token ids; () for none)."""
    ids = [
        engine.add_validated_request(engine.validate(list(p), sp, prediction=pred))
        for p, sp, pred in zip(prompts, params, predictions, strict=True)
    ]
    events = {i: [] for i in ids}
    while engine.has_unfinished():
        for event in engine.step():
            events[event.request_id].append(event)
    return [events[i] for i in ids]


@pytest.mark.parametrize("speculate", [0, 3], ids=["default-launch", "speculate-3"])
def test_predictions_keep_the_tokens_batch_invariant(tiny_llama, speculate, want):
    """A request's prediction (OpenAI's Predicted Outputs) guesses for it alone, on a default launch and
    beside the launch's n-gram guesses: exact, edited or wrong, the tokens are plain decoding's."""
    engine = _engine(tiny_llama, speculate)
    exact = _predicted(engine, [TARGET, TARGET], [GREEDY, SEEDED], want)
    assert [[e.token_id for e in r] for r in exact] == want, "predicting the output itself"
    for r in exact:  # every token predicted, none refused
        assert (r[-1].num_accepted_prediction_tokens, r[-1].num_rejected_prediction_tokens) == (NEW_TOKENS, 0)
    edited = [[*w[:4], (w[4] + 1) % 256, *w[6:]] for w in want]  # one token changed, one deleted
    mixed = _predicted(
        engine,
        [*OTHERS, TARGET, TARGET],
        [GREEDY] * len(OTHERS) + [GREEDY, SEEDED],
        [(), (), [1, 2, 3], *edited],
    )
    assert [[e.token_id for e in r] for r in mixed[-2:]] == want, (
        "edited predictions, beside 3 other requests"
    )
    assert all(0 < r[-1].num_accepted_prediction_tokens < NEW_TOKENS for r in mixed[-2:])
