"""Per-request generation parameters, as TGI and OpenAI clients send them (no torch here)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

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
#: `bad_words_ids`: at most this many token sequences and this many token ids in all (vLLM's caps per
#: request): each sequence is matched against the output at every step of the request
MAX_BAD_WORDS_IDS = 128
MAX_BAD_WORDS_TOKENS = 1024
#: `dry_sequence_breaker_ids`: at most this many (head, tail...) sequences, each at most this many tokens
#: (llama.cpp clamps a breaker's tail to 20 tokens). One breaker string becomes one sequence per vocabulary
#: token that holds it or starts it (`tgi.core.sampling_tokens.dry_sequence_breaker_ids`), thousands for "\n"
MAX_DRY_BREAKER_SEQUENCES = 1 << 16
MAX_DRY_BREAKER_TOKENS = 21
#: the most logits processors one request may select (`logits_processors`)
MAX_LOGITS_PROCESSORS = 16


@dataclass(frozen=True)
class LogitsProcessorChoice:
    """A logits processor a request selects (`SamplingParams.logits_processors`): one the operator enabled
    at launch (`--logits-processors`), by its entry-point name, with the arguments it takes (JSON values; the
    processor's `validate_args` checks them when the request is validated)."""

    name: str
    args: dict[str, Any] = field(default_factory=dict, hash=False)  # a dict: it crosses to ranks as JSON


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
    # in [0, 1]; 0 = off (vLLM): after temperature, drop the tokens whose probability is below min_p x the
    # most likely token's, before top-k and top-p
    min_p: float = 0.0
    # >= 0; 0 = off (llama.cpp's top-n-sigma): keep the tokens whose logit is >= the largest minus
    # top_n_sigma standard deviations of the row's (finite) logits
    top_n_sigma: float = 0.0
    repetition_penalty: float = 1.0  # > 0; 1 = off (CTRL-style, over prompt and output tokens)
    frequency_penalty: float = 0.0  # in [-2, 2]; subtracts penalty x count of each output token
    presence_penalty: float = 0.0  # in [-2, 2]; subtracts penalty once per output token seen
    # DRY, "don't repeat yourself" (llama.cpp's): a token that would extend a sequence already seen in the
    # last `dry_penalty_last_n` tokens (prompt and output), repeated for n >= `dry_allowed_length` tokens,
    # loses dry_multiplier x dry_base^(n - dry_allowed_length) from its logit; a sequence breaker stops the
    # sequences looked at (`tgi.core.interfaces.sampling` says how)
    dry_multiplier: float = 0.0  # >= 0; 0 = off
    dry_base: float = 1.75  # >= 1
    dry_allowed_length: int = 2  # >= 1
    dry_penalty_last_n: int = -1  # -1: every token of the sequence; 0: off; n > 0: the last n
    # the breakers as token ids: (head, tail...) sequences, as llama.cpp turns its `dry_sequence_breakers`
    # strings into tokens (`tgi.core.sampling_tokens.dry_sequence_breaker_ids` does, where requests are
    # validated); a head alone (no tail) is a token that breaks sequences wherever it is
    dry_sequence_breaker_ids: tuple[tuple[int, ...], ...] = ()
    # XTC, "exclude top choices" (llama.cpp's): with probability xtc_probability (drawn from the request's
    # seed), when at least two tokens have a probability >= xtc_threshold, all of them but the least
    # likely are removed (after every other truncation)
    xtc_probability: float = 0.0  # in [0, 1]; 0 = off
    xtc_threshold: float = 0.1  # in [0, 1]
    # vLLM's `bad_words` as token ids (`tgi.core.sampling_tokens.bad_words_ids`): a sequence's last token is
    # never generated right after the rest of it was (a one-token word: never)
    bad_words_ids: tuple[tuple[int, ...], ...] = ()
    allowed_token_ids: tuple[int, ...] | None = None  # vLLM's: only these may be generated; None = any
    # plugins (entry-point group `tgi.logits_processors`) the operator enabled, applied in this order
    logits_processors: tuple[LogitsProcessorChoice, ...] = ()
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
    # with prompt_logprobs, vLLM's `prompt_logprobs=k`: each prompt token's rank too, and the k most likely
    # tokens at its position (`RunnerCapabilities.prompt_top_logprobs`); None: the token's logprob only (TGI's)
    prompt_top_n_tokens: int | None = None
    # vLLM's detokenization: special tokens in the output's text (`skip_special_tokens=False`; the token that
    # ends the sequence, EOS or a stop token id, stays out unless `include_stop_str_in_output`), and with
    # them, `spaces_between_special_tokens=False` joins two adjacent added tokens without the space a
    # tokenizer's decoder may put between them
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
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
        self._validate_extended()
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
        top = self.prompt_top_n_tokens  # vLLM's `prompt_logprobs=k`: with the prompt's logprobs only
        if top is not None and (top < 0 or not self.prompt_logprobs):
            raise ValueError("`prompt_logprobs` must be >= 0")
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

    def _validate_extended(self) -> None:
        """The ranges of the samplers vLLM and llama.cpp added (min-p, top-n-sigma, DRY, XTC) and of the
        token lists (bad words, allowed tokens, sequence breakers, logits processors)."""
        finite = ("min_p", "top_n_sigma", "dry_multiplier", "dry_base", "xtc_probability", "xtc_threshold")
        for name in finite:
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"`{name}` must be a finite number")
        for name in ("min_p", "xtc_probability", "xtc_threshold"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"`{name}` must be >= 0.0 and <= 1.0")
        if self.top_n_sigma < 0:
            raise ValueError("`top_n_sigma` must be >= 0.0")
        if self.dry_multiplier < 0:
            raise ValueError("`dry_multiplier` must be >= 0.0")
        if self.dry_base < 1:
            raise ValueError("`dry_base` must be >= 1.0")
        if self.dry_allowed_length < 1:
            raise ValueError("`dry_allowed_length` must be >= 1")
        if self.dry_penalty_last_n < -1:
            raise ValueError("`dry_penalty_last_n` must be >= -1 (-1: the whole sequence, 0: off)")
        breakers = self.dry_sequence_breaker_ids
        if len(breakers) > MAX_DRY_BREAKER_SEQUENCES:
            raise ValueError(
                f"`dry_sequence_breakers` may make at most {MAX_DRY_BREAKER_SEQUENCES} token sequences. "
                f"Given: {len(breakers)}"
            )
        if any(not 1 <= len(seq) <= MAX_DRY_BREAKER_TOKENS for seq in breakers):
            raise ValueError(
                f"`dry_sequence_breakers` token sequences must hold 1 to {MAX_DRY_BREAKER_TOKENS} tokens"
            )
        if any(not seq for seq in self.bad_words_ids):
            raise ValueError("`bad_words` must not be empty")
        if len(self.bad_words_ids) > MAX_BAD_WORDS_IDS:
            raise ValueError(
                f"`bad_words` may make at most {MAX_BAD_WORDS_IDS} token sequences. "
                f"Given: {len(self.bad_words_ids)}"
            )
        if sum(len(seq) for seq in self.bad_words_ids) > MAX_BAD_WORDS_TOKENS:
            raise ValueError(f"`bad_words` may make at most {MAX_BAD_WORDS_TOKENS} tokens in all")
        if self.allowed_token_ids is not None and not self.allowed_token_ids:
            raise ValueError("`allowed_token_ids` must not be empty")
        if len(self.logits_processors) > MAX_LOGITS_PROCESSORS:
            raise ValueError(f"`logits_processors` may select at most {MAX_LOGITS_PROCESSORS} processors")
        if any(not choice.name for choice in self.logits_processors):
            raise ValueError("`logits_processors` names must not be empty")

    @property
    def is_greedy(self) -> bool:
        return not self.do_sample

    @cached_property
    def stop_token_set(self) -> frozenset[int]:
        """`stop_token_ids` as a set, built once: the check after every generated token is O(1)."""
        return frozenset(self.stop_token_ids)

    @cached_property
    def dry_breakers(self) -> dict[int, tuple[tuple[int, ...], ...]]:
        """`dry_sequence_breaker_ids` by head token: head -> the tails that follow it (an empty tail: the head
        breaks alone), built once: DRY reads it at every step."""
        tails: dict[int, list[tuple[int, ...]]] = {}
        for head, *tail in self.dry_sequence_breaker_ids:
            tails.setdefault(head, []).append(tuple(tail))
        return {head: tuple(found) for head, found in tails.items()}

    def __getstate__(self) -> dict:
        """Pickled (to tensor-parallel workers, which never sample) without what is cached from the fields."""
        return {k: v for k, v in self.__dict__.items() if k not in _CACHED}


#: `SamplingParams`' cached properties (not pickled: rebuilt from the fields where read)
_CACHED = ("stop_token_set", "dry_breakers")


def stop_too_long(given: int, field: str = "stop") -> str:
    """The message for a stop sequence of `given` characters past `MAX_STOP_SEQUENCE_CHARS` (in the request
    field `field`)."""
    return f"`{field}` sequences may be at most {MAX_STOP_SEQUENCE_CHARS} characters long. Given: {given}"
