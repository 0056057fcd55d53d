"""A tiny in-process engine implementing `tgi.server.service.protocol.ServingEngine`, for testing the HTTP layer
without a model (a test helper, not part of the package: `pythonpath = ["tests"]` in pyproject.toml).

Character-level: each character is a token (its code point). It "generates" the characters of `REPLY`
in order, then EOS; honours `max_new_tokens`, `ignore_eos`, `top_n_tokens`, seeds, and stop sequences
with core's own stop matching (`tgi.core.stopping`). It validates a request as the real engine does
(`tgi.core.validation`, as a backend without grammar masks), and records what reaches its add path.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from types import SimpleNamespace

from transformers.utils.chat_template_utils import render_jinja_template

from tgi.core.config import EngineConfig
from tgi.core.interfaces import ModelInfo, PoolingSpec, RunnerCapabilities, RunnerConstraints
from tgi.core.request import (
    EngineError,
    EngineRequest,
    FinishReason,
    ImageInput,
    PromptToken,
    TokenEvent,
    TopToken,
    ValidationError,
)
from tgi.core.sampling_params import SamplingParams
from tgi.core.stopping import StopChecker
from tgi.core.validation import (
    RequestLimits,
    check_image_spans,
    check_images,
    check_pooling,
    check_prediction,
    check_runner_features,
    validate_request,
)

REPLY = "Hello world!"
EOS_ID = 0


class CharBackend:
    """What the server uses of a fast tokenizer's `tokenizers.Tokenizer`: a batch encode (to count tokens)."""

    encode_special_tokens = False

    def encode_batch(self, texts: list[str], add_special_tokens: bool = True) -> list[list[int]]:
        return [[ord(c) for c in text] for text in texts]


#: the fake model's chat template: `<role>content` per message, `<assistant>` as the generation prompt
TEMPLATE = (
    "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
    "{% if add_generation_prompt %}<assistant>{% endif %}"
)


class CharTokenizer:
    backend_tokenizer = CharBackend()
    split_special_tokens = False
    chat_template = TEMPLATE
    eos_token_id = EOS_ID
    all_special_ids = (EOS_ID,)
    name_or_path = ""  # no folder: no image processor

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        return [ord(c) for c in text]

    def decode(self, ids: list[int], **_options) -> str:  # a detokenizer's options change nothing here
        return "".join(chr(i) for i in ids if i != EOS_ID)

    def __call__(
        self, text: str, return_offsets_mapping: bool = False, add_special_tokens: bool = True
    ) -> dict:
        return {"input_ids": self.encode(text), "offset_mapping": [(i, i + 1) for i in range(len(text))]}

    def apply_chat_template(
        self, messages, tokenize=False, add_generation_prompt=True, chat_template=None, **kwargs
    ):
        """Rendered as transformers' tokenizers render with `tokenize=False` (its renderer, in Jinja's sandbox):
        `TEMPLATE` (also where a subclass changes `chat_template` to look like another family's), or a
        request's own `chat_template`; `kwargs`: `continue_final_message`, `tools`, `documents` and the
        template's variables."""
        [text], _ = render_jinja_template(
            [messages],
            chat_template=chat_template or TEMPLATE,
            add_generation_prompt=add_generation_prompt,
            **kwargs,
        )
        return text


@dataclass
class FakeEngine:
    """Records what reached it (`requests`) and which streams were closed early (`cancelled`)."""

    config: EngineConfig = field(
        default_factory=lambda: EngineConfig(
            model_id="fake/model",
            max_input_tokens=64,
            max_total_tokens=128,
            max_batch_prefill_tokens=256,
            max_batch_total_tokens=1024,
        )
    )
    delay: float = 0.0  # seconds per token
    first_delay: float = 0.0  # seconds before the first token (a request waiting in the queue)
    fail_stream: int | None = None  # the stream of this index (0: the first one asked for) fails at once
    fail_with: EngineError | None = None  # what that stream raises (default: a plain EngineError)
    model_id: str = "fake/model"
    backend_name: str = "fake"
    tokenizer: CharTokenizer = field(default_factory=CharTokenizer)
    model_info: ModelInfo = field(
        default_factory=lambda: ModelInfo(
            architecture="Fake",
            vocab_size=0x110000,
            max_position_embeddings=128,
            eos_token_ids=(EOS_ID,),
            dtype="float32",
            num_parameters=0,
        )
    )
    speculation: str | None = None
    kernels: dict[str, str] = field(default_factory=dict)
    requests: list = field(default_factory=list)
    images: list = field(default_factory=list)  # each stream's `EngineRequest.images`, as `requests`
    queued: list = field(default_factory=list)  # each stream's `EngineRequest`, whole (its salt and tenant)
    cancelled: list = field(default_factory=list)
    running: int = 0
    started: bool = False
    closed: bool = False  # `close()` was called (its model released)
    healthy: bool = True
    error: BaseException | None = None
    on_death: Callable[[BaseException], None] | None = None
    refuse: str | None = None  # raise ValidationError(refuse) from stream(), as the real engine may
    # the k-th stream asked for says cached_tokens[k] prompt tokens came from the prefix cache (0 past it)
    cached_tokens: tuple[int, ...] = ()
    reply: str = REPLY  # the text every request "generates" (a recorded model output, for parsers)
    eos_token_ids: frozenset[int] = frozenset({EOS_ID})
    image_inputs: bool = False  # takes images as a runner with a vision tower does (else refused by name)
    verifies_drafts: bool = True  # takes Predicted Outputs as a runner that verifies guesses does
    prefix_cache_resets: int = 0  # POST /flush_cache calls

    async def start(self) -> None:
        self.started = True

    async def shutdown(self, cancel_inflight: bool = False, reason: str | None = None) -> None:
        self.started = False

    def close(self) -> None:
        self.closed = True

    async def load_lora_adapter(self, name: str, path: str) -> None:
        """Serve `name` from now on (no weights: the fake generates the same either way)."""
        if name in self.model_info.lora_adapters:
            raise ValueError(f"a LoRA adapter named `{name}` is loaded already")
        adapters = (*self.model_info.lora_adapters, name)
        self.model_info = dataclasses.replace(self.model_info, lora_adapters=adapters)

    async def reset_prefix_cache(self) -> int:
        """Empty the prefix cache: the fake caches nothing, so nothing is dropped."""
        self.prefix_cache_resets += 1
        return 0

    async def unload_lora_adapter(self, name: str) -> None:
        if name not in self.model_info.lora_adapters:
            raise KeyError(name)
        adapters = tuple(a for a in self.model_info.lora_adapters if a != name)
        self.model_info = dataclasses.replace(self.model_info, lora_adapters=adapters)

    def stats(self) -> SimpleNamespace:
        used = self.running
        return SimpleNamespace(
            num_waiting=0,
            num_running=self.running,
            num_batch_tokens=self.running,
            num_prefill_tokens=0,
            num_prefix_cache_hit_tokens=0,
            num_prefix_cache_miss_tokens=0,
            num_draft_tokens=0,
            num_accepted_draft_tokens=0,
            step_seconds=0.0,
            encoder_seconds=0.0,
            num_free_blocks=64 - used,
            num_total_blocks=64,
            block_size=16,
        )

    def validate(
        self,
        prompt_token_ids: list[int],
        params: SamplingParams,
        images: tuple[ImageInput, ...] = (),
        prediction: tuple[int, ...] = (),
        pooling: bool = False,
        token_embeddings: bool = False,
    ) -> EngineRequest:
        if self.refuse:
            raise ValidationError(self.refuse)
        runs = RunnerCapabilities(pooling=True, token_embeddings=True)
        check_pooling(pooling, self.model_info, params, token_embeddings, runs, "fake")
        images = tuple(images)
        check_images(images, RunnerCapabilities(image_inputs=self.image_inputs), "fake", "Fake")
        config, info = self.config, self.model_info
        limits = RequestLimits(
            config.max_input_tokens, config.max_total_tokens, info.vocab_size, info.lora_adapters
        )
        # a backend without grammar masks (the real engine's words), checked first as the engine does
        check_runner_features(params, RunnerCapabilities(token_masks=False), "fake")
        params = validate_request(prompt_token_ids, params, limits)
        check_image_spans(images, len(prompt_token_ids))
        features = RunnerCapabilities(draft_verification=self.verifies_drafts)
        check_prediction(prediction, features, RunnerConstraints(), limits, "fake")
        return EngineRequest(
            tuple(prompt_token_ids), params, images=images, prediction=tuple(prediction), pooling=pooling,
            token_embeddings=token_embeddings,
        )  # fmt: skip

    def stream_validated(
        self, request: EngineRequest, request_id: str | None = None
    ) -> AsyncIterator[TokenEvent]:
        prompt, params = list(request.prompt_token_ids), request.params
        self.requests.append((prompt, params))
        self.images.append(request.images)
        self.queued.append(request)
        k = len(self.requests) - 1
        cached = self.cached_tokens[k] if k < len(self.cached_tokens) else 0
        if request.pooling:
            return self._pooled(request_id or "r", prompt, k == self.fail_stream, request.token_embeddings)
        return self._run(request_id or "r", prompt, params, k == self.fail_stream, cached)

    async def _run(
        self, rid: str, prompt: list[int], params: SamplingParams, fails: bool, cached: int = 0
    ) -> AsyncIterator[TokenEvent]:
        self.running += 1
        finished = False
        stops = StopChecker(params.stop, params.include_stop_str_in_output)
        try:
            if fails:
                await asyncio.sleep(0)
                finished = True
                raise self.fail_with or EngineError("the engine failed while running this request")
            if self.first_delay:
                await asyncio.sleep(self.first_delay)
            for i in range(params.max_new_tokens):
                if self.delay:
                    await asyncio.sleep(self.delay)
                else:
                    await asyncio.sleep(0)
                pos = i % (len(self.reply) + 1) if params.ignore_eos else i
                eos = pos >= len(self.reply)
                if params.ignore_eos and eos:
                    pos, eos = 0, False
                char = "" if eos else self.reply[pos]
                check = stops.add(char)
                reason = None
                if eos:
                    reason = FinishReason.EOS
                elif check.stopped:
                    reason = FinishReason.STOP
                elif i + 1 == params.max_new_tokens:
                    reason = FinishReason.LENGTH
                text = check.text + (stops.flush() if reason is not None and not check.stopped else "")
                tops = tuple(
                    TopToken(ord("a") + k, chr(ord("a") + k), -1.0 - k, False)
                    for k in range(params.top_n_tokens)
                )
                final = reason is not None
                yield TokenEvent(
                    request_id=rid,
                    index=i,
                    token_id=EOS_ID if eos else ord(char),
                    token_text="</s>" if eos else char,
                    text=text,
                    logprob=-0.5 if params.logprobs else None,
                    special=eos,
                    top_tokens=tops,
                    finish_reason=reason,
                    generated_text=stops.text if final else None,
                    stop_sequence=stops.stop_sequence if final else None,
                    num_prompt_tokens=len(prompt),
                    num_cached_tokens=cached if final else 0,
                    prompt_tokens=tuple(
                        PromptToken(t, chr(t), None if k == 0 else -1.0) for k, t in enumerate(prompt)
                    )
                    if final and params.prompt_logprobs
                    else None,
                    seed=params.seed if params.do_sample else None,
                    queue_time=0.001 if final else 0.0,
                    inference_time=0.01 if final else 0.0,
                )
                if final:
                    finished = True
                    return
        finally:
            self.running -= 1
            if not finished:
                self.cancelled.append(rid)

    async def _pooled(
        self, rid: str, prompt: list[int], fails: bool, tokens: bool = False
    ) -> AsyncIterator[TokenEvent]:
        """A pooling request's one event: `fake_vector(prompt)`, as a pooling model's engine answers (with
        `tokens`, each token's `fake_vector([token])`)."""
        self.running += 1
        try:
            await asyncio.sleep(self.first_delay)
            if fails:
                raise self.fail_with or EngineError("the engine failed while running this request")
            dimension = self.model_info.pooling.dimension
            vector = None if tokens else tuple(fake_vector(prompt, dimension))
            states = tuple(tuple(fake_vector([t], dimension)) for t in prompt) if tokens else None
            yield TokenEvent(
                rid, -1, -1, "", "", None, False, finish_reason=FinishReason.LENGTH, generated_text="",
                num_prompt_tokens=len(prompt), embedding=vector, token_embeddings=states,
            )  # fmt: skip
        finally:
            self.running -= 1


def fake_vector(prompt: list[int], dimension: int) -> list[float]:
    """The fake pooling model's vector of a prompt (not normalized): its length, then values of its ids."""
    return [float(len(prompt))] + [float((sum(prompt) * (j + 1)) % 7 + 1) for j in range(dimension - 1)]


def pooling_engine(spec: PoolingSpec, **fields) -> FakeEngine:
    """A fake engine serving a pooling model of `spec` (`fake_vector`s)."""
    engine = FakeEngine(**fields)
    engine.model_info = dataclasses.replace(engine.model_info, pooling=spec)
    return engine


def error_of(response, path: str) -> tuple[str, str]:
    """(message, type) of an error response, after checking it has its API's shape: OpenAI's
    `{"error": {"message", "type", "param", "code"}}` on `/v1/*`, TGI's `{"error", "error_type"}` elsewhere."""
    body = response.json()
    if path.startswith("/v1/"):
        assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
        return body["error"]["message"], body["error"]["type"]
    assert set(body) == {"error", "error_type"}, body
    return body["error"], body["error_type"]


def conversation_engine(engine_class: type[FakeEngine] = FakeEngine, **fields) -> FakeEngine:
    """A fake engine (`engine_class`, with `fields`) with room for conversations of a few turns (a character
    is a token)."""
    limits = dict(max_input_tokens=400, max_total_tokens=512, max_batch_prefill_tokens=512)
    config = EngineConfig(model_id="fake/model", max_batch_total_tokens=2048, **limits)
    return engine_class(config=config, **fields)
