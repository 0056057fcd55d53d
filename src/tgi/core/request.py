"""What goes into the engine and what comes out of it, as the server sees it (no torch here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from tgi.core.sampling_params import SamplingParams

if TYPE_CHECKING:  # the compiler imports llguidance lazily; a request only holds its result
    from tgi.core.guided.compiler import CompiledGrammar


class FinishReason(str, Enum):
    """Why a sequence ended; the values are TGI's."""

    LENGTH = "length"  # max_new_tokens reached (or max total tokens)
    EOS = "eos_token"  # an end-of-sequence token
    STOP = "stop_sequence"  # a stop sequence matched
    CANCELLED = "cancelled"  # the client went away (never sent to a client)


@dataclass(frozen=True)
class TopToken:
    """One alternative at a step (TGI `top_tokens` entry)."""

    id: int
    text: str
    logprob: float
    special: bool


@dataclass(frozen=True)
class PromptToken:
    """One prompt token with its logprob (TGI `details.prefill`); the first has logprob None. With vLLM's
    `prompt_logprobs` (`SamplingParams.prompt_top_n_tokens`), its rank and its position's top tokens too."""

    id: int
    text: str
    logprob: float | None
    rank: int | None = None
    top_tokens: tuple[TopToken, ...] = ()


@dataclass(frozen=True)
class TokenEvent:
    """One generated token of one request, in order. The last event of a request has `finish_reason`."""

    request_id: str
    index: int  # 0-based position among generated tokens
    token_id: int
    token_text: str  # this token's own text (TGI `token.text`)
    text: str  # new, complete text to append to the output (never a broken UTF-8 sequence; may be "")
    logprob: float | None  # when details/logprobs were asked
    special: bool  # an EOS or other special token
    top_tokens: tuple[TopToken, ...] = ()
    finish_reason: FinishReason | None = None
    # set on the last event only
    generated_text: str | None = None  # the whole output text (with a matched stop sequence only when
    # `include_stop_str_in_output`)
    stop_sequence: str | None = None  # the stop sequence that ended it (finish_reason STOP)
    num_prompt_tokens: int = 0
    num_cached_tokens: int = 0  # prompt tokens whose keys/values came from the prefix cache
    num_skipped_tokens: int = 0  # (final event) tokens accepted from speculation: no step of their own
    # (final event, a request with a prediction) the prediction's tokens the output said where the walk along
    # it placed them, and those a verification refused (`tgi.core.speculative.prediction`)
    num_accepted_prediction_tokens: int = 0
    num_rejected_prediction_tokens: int = 0
    prompt_tokens: tuple[PromptToken, ...] | None = None  # when prompt logprobs were asked
    seed: int | None = None  # the seed used, when sampling
    queue_time: float = 0.0  # seconds from arrival to the first scheduled step
    inference_time: float = 0.0  # seconds from the first scheduled step to the end
    # a pooling request's one event (final; `index` -1 and `token_id` -1: no token was generated): the pooled
    # vector of its prompt (`tgi.core.interfaces.pooling.PoolingSpec`, before normalization)
    embedding: tuple[float, ...] | None = None
    # a token-embeddings request's one event, in place of `embedding`: the final hidden state of each token of
    # its prompt, in order (`StepOutput.token_embeddings`)
    token_embeddings: tuple[tuple[float, ...], ...] | None = None


@dataclass
class GenerationResult:
    """A whole request's output (what `LLMEngine.generate` and `AsyncEngine.generate` return)."""

    request_id: str
    generated_text: str
    token_ids: list[int]
    finish_reason: FinishReason
    events: list[TokenEvent] = field(default_factory=list)

    @property
    def final(self) -> TokenEvent:
        return self.events[-1]

    def add(self, event: TokenEvent) -> None:
        """Append the request's next event; the last one sets the finish reason and the whole text."""
        self.events.append(event)
        self.token_ids.append(event.token_id)
        if event.finish_reason is not None:
            self.finish_reason = event.finish_reason
            self.generated_text = event.generated_text or ""


@dataclass(frozen=True)
class ImageInput:
    """One image of a prompt, or one tile of it, as the model's processor made it: what the engine's vision
    tower encodes alone. It turns `pixel_values` into `num_tokens` embeddings that replace the prompt's
    placeholder tokens at `offset` .. `offset + num_tokens - 1` (positions in `EngineRequest.prompt_token_ids`):
    one run of placeholders. A processor that cuts an image into tiles with text between their runs
    (Idefics3's `<row_1_col_1>` ..., the whole image shrunk as the last tile) makes one `ImageInput` per tile.

    `pixel_values` and `extras` are the processor's arrays for this image (tile) alone (numpy; the runner
    moves them to its device), `extras` holding what the model's tower needs beside the pixels
    (`image_sizes`, `image_grid_thw`, `pixel_attention_mask`, ...). `content_hash` is a digest of the image's
    bytes (after decoding the URL, before preprocessing), with the tile's index for a tile: the prefix cache
    keys a block that holds any of its placeholders by it, so two prompts with the same text and different
    images never share a block."""

    pixel_values: Any
    offset: int
    num_tokens: int
    content_hash: bytes
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class EngineRequest:
    """A request the engine queues as it is: the one thing that crosses from the server (or any caller) into
    the engine. Only validation makes one (`LLMEngine.validate`: the limits and features of
    `tgi.core.validation`, defaults resolved, the grammar compiled), so the engine's add path
    (`LLMEngine.add_validated_request`, `AsyncEngine.stream_validated`) never validates or compiles."""

    prompt_token_ids: tuple[int, ...]
    params: SamplingParams  # checked, `max_new_tokens` resolved
    grammar: CompiledGrammar | None = None  # `params.grammar` compiled for the engine's tokenizer
    images: tuple[
        ImageInput, ...
    ] = ()  # in prompt order; only a runner whose capabilities take images gets any
    # who may share this request's prefix-cache blocks (`tgi.core.block_hash.request_cache_key`): the client's
    # `cache_salt` (vLLM's field: only requests with the same salt share blocks; None shares with the unsalted)
    # and the tenant the server authenticated (--api-key-file: tenants never share). Set by the server after
    # validation (`dataclasses.replace`); an empty salt is refused here, as vLLM refuses it.
    cache_salt: str | None = None
    tenant: str | None = None
    # the output's tokens as the client predicts them (OpenAI's Predicted Outputs): guesses verified as
    # speculative decoding's, so they change the output's speed, never the output (`LLMEngine.validate`)
    prediction: tuple[int, ...] = ()
    # a pooling request (embeddings, `LLMEngine.validate(..., pooling=True)`): its prompt is pooled, nothing
    # is generated; its one event carries `TokenEvent.embedding`
    pooling: bool = False
    # with `pooling`: the prompt's tokens' final hidden states, unpooled (`TokenEvent.token_embeddings`)
    token_embeddings: bool = False

    def __post_init__(self) -> None:
        if self.cache_salt == "" or self.tenant == "":
            raise ValueError("`cache_salt` and `tenant` must be non-empty strings if provided")
        compiled = self.grammar.grammar if self.grammar is not None else None
        if compiled != self.params.grammar:  # a caller's bug, not the client's
            raise ValueError(
                "a request with a grammar must carry it compiled, and only that one (LLMEngine.validate "
                "compiles it, off the engine thread and the event loop)"
            )


class EngineError(RuntimeError):
    """The engine failed while running a request; `client_message()` is what a client may be shown: `shown`
    where it was given (the message then has details for the log and for callers of the engine), else the
    message itself, unless a subclass says otherwise."""

    def __init__(self, *args: object, shown: str | None = None) -> None:
        super().__init__(*args)
        self.shown = shown

    def client_message(self) -> str:
        return self.shown if self.shown is not None else str(self)


def client_message_of(error: BaseException | None) -> str:
    """What a client may read of the error that stopped an engine: an `EngineError`'s client message; of
    anything else its type only (its text may name paths or peers: the log has it). Callers of the engine
    read the details in the message of the `EngineError` made with it (`shown=`)."""
    if error is None:
        return "it was stopped"
    if isinstance(error, EngineError):
        return error.client_message()
    return f"{type(error).__name__} (see the server log)"


class StepError(EngineError):
    """One engine step failed: the requests it ran (`request_ids`) cannot go on; the others can. The
    cause is chained (`__cause__`) for the log, not put in the message."""

    def __init__(self, request_ids: list[str]) -> None:
        super().__init__("the engine failed while running this request (the server log has the cause)")
        self.request_ids = request_ids


class ValidationError(ValueError):
    """A request the engine refuses before it is queued (TGI answers 422). `param`: the request field it
    refuses, where one field is to blame (the server's error names it, as OpenAI's `param`)."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class UnusableGrammarError(ValidationError):
    """The request's grammar cannot constrain this model's output (it does not compile, or the backend
    applies no grammar masks): the server's 422 names the request field that gave the grammar."""
