"""Shared set-up of the integration tests on the real default model (SmolLM2-135M-Instruct, GGUF).

Loading the model costs tens of seconds, so it is loaded once per session, lazily (only when a test asks):

- `engine`: an `LLMEngine` in float32, loaded with `LLMEngine.from_config` (GGUF weights, tokenizer, KV cache,
  warm-up), used as is by nothing that changes its state;
- `make_engine(**limits)`: a fresh `LLMEngine` with its own scheduler, block manager and limits (`derive_limits`
  applied) on the weights and KV storage of `engine`'s runner, so that each test starts from an empty engine
  and tests can shrink the step budget or the KV cache without reloading the model. The runner's KV storage
  is only ever read at positions the same engine wrote first, so stale blocks from an earlier engine never
  matter. Engines made here must not step concurrently (pytest runs tests one after another);
- `hf_model`: `transformers`' reference, `AutoModelForCausalLM.from_pretrained(folder, gguf_file=...)` in
  float32 (its checkpoint cached per machine: `tgi.core.testing.transformers_gguf`), and
  `hf_greedy_mismatches`: tokens that are not its greedy `generate`'s, checked teacher forced.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

from tgi.core.config import EngineConfig
from tgi.core.engine import LLMEngine
from tgi.core.engine_startup import derive_limits
from tgi.core.tokenization import apply_chat_template

#: kept small: the warm-up runs one prefill of `max_batch_prefill_tokens` and one decode of `max_num_seqs`
ENGINE_LIMITS = dict(
    max_batch_total_tokens=4096, max_total_tokens=1024, max_batch_prefill_tokens=256, max_num_seqs=16
)

#: varied prompts: short and long, code, French, Japanese, numbers, a list, and a chat-templated one
TEXT_PROMPTS = {
    "short": "The capital of France is",
    "code": 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n',
    "story": (
        "Once upon a time, in a small village at the edge of a great forest, there lived an old clockmaker "
        "who had spent his whole life building clocks that never told the right time. One morning,"
    ),
    "french": "La tour Eiffel est située à Paris. Elle a été construite",
    "math": "Question: What is 17 multiplied by 23?\nAnswer:",
    "numbers": "1, 1, 2, 3, 5, 8, 13,",
    "japanese": "日本の首都は",
    "list": "Here is a list of three fruits:\n1.",
    "long": (
        "The history of computing is longer than the history of computing hardware and modern computing "
        "technology and includes the history of methods intended for pen and paper or for chalk and slate, "
        "with or without the aid of tables. Digital computing is intimately tied to the representation of "
        "numbers. But long before abstractions like the number arose, there were mathematical concepts to "
        "serve the purposes of civilization. These concepts are implicit in concrete practices such as"
    ),
}
CHAT_PROMPTS = {"chat": [{"role": "user", "content": "Write a haiku about the sea."}]}


@pytest.fixture(scope="session")
def engine() -> LLMEngine:
    return LLMEngine.from_config(EngineConfig(dtype="float32", **ENGINE_LIMITS))


@pytest.fixture(scope="session")
def make_engine(engine: LLMEngine) -> Callable[..., LLMEngine]:
    cache_tokens = engine.runner.kv_cache.num_blocks * engine.config.block_size

    def make(**limits) -> LLMEngine:
        config = EngineConfig(dtype=engine.config.dtype, **{**ENGINE_LIMITS, **limits})
        config = derive_limits(config, engine.model_info, engine.runner, engine.backend)
        assert config.max_batch_total_tokens <= cache_tokens, "the shared KV storage is smaller"
        return LLMEngine(engine.backend, engine.runner, engine.tokenizer, config, engine.model_info)

    return make


@pytest.fixture(scope="session")
def tokenizer(engine: LLMEngine):
    return engine.tokenizer


@pytest.fixture(scope="session")
def prompts(tokenizer) -> dict[str, list[int]]:
    """Name -> prompt token ids (what both our engine and transformers are given)."""
    ids = {name: list(tokenizer.encode(text)) for name, text in TEXT_PROMPTS.items()}
    ids.update({name: apply_chat_template(tokenizer, msgs) for name, msgs in CHAT_PROMPTS.items()})
    return ids


@pytest.fixture(scope="session")
def hf_model():
    from tgi.core.loading import default_model_path
    from tgi.core.testing.transformers_gguf import load_transformers_gguf

    return load_transformers_gguf(default_model_path())  # converted by transformers once per machine


@pytest.fixture(scope="session")
def hf_greedy_mismatches(hf_model) -> Callable[[dict[str, tuple[list[int], list[int]]], int], dict]:
    """`hf_greedy_mismatches({name: (prompt ids, tokens)}, n)`: the names whose tokens are not what
    `transformers`' greedy `generate(max_new_tokens=n)` gives (ending at EOS when the model emits it), with
    (tokens, transformers' greedy tokens teacher forced on them). Checked teacher forced: one forward pass
    over every prompt + tokens together (right-padded: a causal model's logits at a position never see the
    ones after it), whose argmax after each prefix must be the next token, and the tokens end at their
    first EOS or at n; that is the condition for greedy decoding to give exactly those tokens, at one forward pass instead
    of one per token (each reads all 540 MB of the model's float32 weights). Memoised for the session."""
    memo: dict[tuple[int, ...], list[int]] = {}
    eos = hf_model.generation_config.eos_token_id
    eos = {eos} if isinstance(eos, int) else set(eos or ())

    def forced(sequences: list[tuple[int, ...]]) -> None:
        todo = [s for s in dict.fromkeys(sequences) if s not in memo]
        if not todo:
            return
        width = max(len(s) for s in todo)
        x = torch.tensor([list(s) + [0] * (width - len(s)) for s in todo])
        with torch.inference_mode():
            argmax = hf_model(x).logits.argmax(-1).tolist()
        for s, row in zip(todo, argmax, strict=True):
            memo[s] = row[: len(s)]

    def mismatches(runs: dict[str, tuple[list[int], list[int]]], n: int) -> dict:
        forced([tuple(ids + tokens) for ids, tokens in runs.values()])
        wrong = {}
        for name, (ids, tokens) in runs.items():
            want = memo[tuple(ids + tokens)][len(ids) - 1 :]  # the greedy token after each prefix
            ends = len(tokens) == n or (tokens and tokens[-1] in eos)
            if not tokens or want[: len(tokens)] != tokens or not ends or eos & set(tokens[:-1]):
                wrong[name] = (tokens, want)
        return wrong

    return mismatches


@pytest.fixture(scope="session")
def hf_logprobs(hf_model) -> Callable[[list[int]], torch.Tensor]:
    """`hf_logprobs(ids)`: [len(ids), vocab] float64 log-softmax of `transformers`' logits over `ids`;
    row p is the distribution of token p + 1."""

    def logprobs(ids: list[int]) -> torch.Tensor:
        with torch.inference_mode():
            logits = hf_model(torch.tensor([ids])).logits[0]
        return torch.log_softmax(logits.double(), dim=-1)

    return logprobs
