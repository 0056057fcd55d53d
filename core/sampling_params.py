"""Per-request generation parameters, as TGI and OpenAI clients send them (no torch here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING

from tgi.core.guided.grammar import Grammar

if TYPE_CHECKING:  # tgi.core.watermark reads the sampling spec, whose package imports this module
    from tgi.core.watermark import Watermark

#: the most tokens one request's `logit_bias` may name (OpenAI's own cap): the sampler adds them to the
#: logits at every step of the request
MAX_LOGIT_BIAS = 300
#: the most `stop_token_ids` one request may give. vLLM has no cap; one is needed because every id is checked
#: against the vocabulary and kept for the request's life. 300 holds every special token of the models
#: served (Llama 3 reserves 256), and more than that is no stop condition but a ban better said otherwise.
MAX_STOP_TOKEN_IDS = 300
#: the longest stop sequence, in characters. OpenAI caps their count (4; `--max-stop-sequences` here), not
#: their length, and neither does vLLM; each one is matched on the text of every token, holding back any
#: suffix that could start it, so a 100,000-character one cost the engine thread seconds per token. The
#: stops people write are a few words (a role marker, a closing tag); 1024 leaves room for any of those.
MAX_STOP_SEQUENCE_CHARS = 1024


@dataclass(frozen=True)
class SamplingParams:
    """How to pick each next token and when to stop. Defaults mean greedy decoding, as TGI's
    `do_sample=false`. `LLMEngine.validate` resolves `max_new_tokens=None` and validates the whole request
    once (`tgi.core.validation`, which calls `validate()`) into the `EngineRequest` that carries the grammar
    compiled; the server answers its error with a 422."""

    do_sample: bool = False
    temperature: float = 1.0  # > 0; with do_sample=False it is ignored (greedy)
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # in (0, 1]; 1 = off
    typical_p: float = 1.0  # in (0, 1]; 1 = off
    repetition_penalty: float = 1.0  # > 0; 1 = off (CTRL-style, over prompt and output tokens)
    frequency_penalty: float = 0.0  # in [-2, 2]; subtracts penalty x count of each output token
    presence_penalty: float = 0.0  # in [-2, 2]; subtracts penalty once per output token seen
    seed: int | None = None  # same seed, same tokens, whatever else shares the batch
    max_new_tokens: int | None = 20  # None: what is left of the engine's max_total_tokens (TGI's default)
    min_new_tokens: int = 0  # EOS and stop sequences are ignored before this many tokens
    stop: tuple[str, ...] = ()  # stop sequences, matched on the detokenized text (may span tokens)
    stop_token_ids: tuple[int, ...] = ()  # extra token ids that end the sequence (EOS is always one)
    include_stop_str_in_output: bool = False  # keep a matched stop sequence in the text (TGI's routes do)
    ignore_eos: bool = False  # keep generating through EOS (benchmarks use fixed output lengths)
    logprobs: bool = False  # report the chosen token's logprob (TGI `details`)
    top_n_tokens: int = 0  # also report this many most likely alternatives per step
    prompt_logprobs: bool = False  # logprobs of the prompt tokens (TGI `decoder_input_details`)
    # (token id, bias) pairs added to those tokens' logits before anything else reads them (OpenAI's
    # `logit_bias`); each token id at most once, each bias in [-100, 100]
    logit_bias: tuple[tuple[int, float], ...] = ()
    priority: int = 0  # higher runs first; equal priorities are FIFO
    grammar: Grammar | None = None  # the output must match it (JSON schema, regex, Lark): guided decoding
    watermark: Watermark | None = None  # green-list watermark on the logits (TGI's `watermark`)
    adapter_id: str | None = None  # the LoRA adapter to run with (`--lora-adapters` id); None: the base model
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    def validate(self) -> None:
        """Raise `ValueError` with a user-facing message if any field is out of range (`max_new_tokens=None`
        is in range: the engine resolves it first)."""
        if self.temperature <= 0:
            raise ValueError("`temperature` must be strictly positive")
        if self.top_k < 0:
            raise ValueError("`top_k` must be strictly positive")
        if not 0 < self.top_p <= 1:
            raise ValueError("`top_p` must be > 0.0 and <= 1.0")
        if not 0 < self.typical_p <= 1:
            raise ValueError("`typical_p` must be > 0.0 and <= 1.0")
        if self.repetition_penalty <= 0:
            raise ValueError("`repetition_penalty` must be strictly positive")
        if not -2 <= self.frequency_penalty <= 2:
            raise ValueError("`frequency_penalty` must be >= -2.0 and <= 2.0")
        if not -2 <= self.presence_penalty <= 2:
            raise ValueError("`presence_penalty` must be >= -2.0 and <= 2.0")
        if self.max_new_tokens is not None and self.max_new_tokens < 1:
            raise ValueError("`max_new_tokens` must be strictly positive")
        too_many = self.max_new_tokens is not None and self.min_new_tokens > self.max_new_tokens
        if self.min_new_tokens < 0 or too_many:
            raise ValueError("`min_new_tokens` must be >= 0 and <= `max_new_tokens`")
        if self.top_n_tokens < 0:
            raise ValueError("`top_n_tokens` must be >= 0")
        if self.seed is not None and not 0 <= self.seed < 2**64:
            raise ValueError("`seed` must be in [0, 2^64)")
        if len(self.logit_bias) > MAX_LOGIT_BIAS:
            raise ValueError(
                f"`logit_bias` may name at most {MAX_LOGIT_BIAS} tokens. Given: {len(self.logit_bias)}"
            )
        if any(len(stop) > MAX_STOP_SEQUENCE_CHARS for stop in self.stop):
            raise ValueError(stop_too_long(max(len(stop) for stop in self.stop)))
        if len(self.stop_token_ids) > MAX_STOP_TOKEN_IDS:
            raise ValueError(
                f"`stop_token_ids` may hold at most {MAX_STOP_TOKEN_IDS} token ids. "
                f"Given: {len(self.stop_token_ids)}"
            )
        if len({t for t, _ in self.logit_bias}) != len(self.logit_bias):
            raise ValueError("`logit_bias` names a token id more than once")
        if any(not -100 <= b <= 100 for _, b in self.logit_bias):
            raise ValueError("`logit_bias` values must be >= -100 and <= 100")
        if self.watermark is not None:
            self.watermark.validate()
        if self.grammar is not None and (self.min_new_tokens or self.ignore_eos):
            # the grammar decides where the output ends: past its end only the end of sequence is allowed
            name = "min_new_tokens" if self.min_new_tokens else "ignore_eos"
            raise ValueError(
                f"`{name}` cannot be combined with a grammar: the grammar decides where the output ends"
            )

    @property
    def is_greedy(self) -> bool:
        return not self.do_sample

    @cached_property
    def stop_token_set(self) -> frozenset[int]:
        """`stop_token_ids` as a set, built once: the check after every generated token is O(1)."""
        return frozenset(self.stop_token_ids)

    def __getstate__(self) -> dict:
        """Pickled (to tensor-parallel workers, which never sample) without what is cached from the fields."""
        return {k: v for k, v in self.__dict__.items() if k != "stop_token_set"}


def stop_too_long(given: int, field: str = "stop") -> str:
    """The message for a stop sequence of `given` characters past `MAX_STOP_SEQUENCE_CHARS` (in the request
    field `field`)."""
    return f"`{field}` sequences may be at most {MAX_STOP_SEQUENCE_CHARS} characters long. Given: {given}"
