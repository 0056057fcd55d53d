"""The one path of an embeddings request, for every API that serves one (OpenAI's `/v1/embeddings`, TEI's
`/embed`, Ollama's `/api/embed`; a classifier's scores take it too, `tgi.server.service.scoring`): each input
tokenized, checked against the limits, validated by the engine as a pooling request
and queued on the engine like a generation (same admission, scheduler, batching, limits, metrics), its
pooled vector cut to the asked width (Matryoshka) and normalized."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from tgi.core.interfaces.pooling import PoolingSpec
from tgi.core.request import EngineRequest, TokenEvent, ValidationError
from tgi.core.sampling_params import SamplingParams
from tgi.core.validation import POOLING_OUTPUTS, too_many_input_tokens
from tgi.server.http import sse
from tgi.server.http.auth import tenant_of
from tgi.server.http.errors import validation_error
from tgi.server.service.pooling_routes import serves

if TYPE_CHECKING:
    from starlette.requests import Request

    from tgi.server.service.inference import InferenceService
    from tgi.server.service.request_tracker import RequestTracker

#: what a pooling request asks of the engine: its prompt's one step, no token
POOLING_PARAMS = SamplingParams(max_new_tokens=1)


@dataclass(frozen=True)
class EmbedRequest:
    """An embeddings request as a route read it (its HTTP shape checked): what to embed and how."""

    inputs: Sequence[str | list[int]]  # texts, or token ids as given
    field: str  # the request field of the inputs (`input`, `inputs`), named by its refusals
    normalize: bool  # L2-normalize each vector (after the cut to `dimensions`)
    dimensions: int | None = None  # Matryoshka: the first `dimensions` values; None: the model's width
    dimensions_field: str = "dimensions"
    # cut each input's tokens to `--max-input-tokens` instead of refusing it: "right" keeps its first tokens,
    # "left" its last (TEI's `truncate` and `truncation_direction`); None: refuse an input too long
    truncate: str | None = None
    prompt: str = ""  # sentence-transformers' prompt put before every text input (`prompt_name`)
    kind: str = "embed"  # what the model must be (`PoolingSpec.kind`): an embedder, or a classifier
    # each input's name in its refusals (a route whose inputs are several fields: `/similarity`'s); None:
    # `field[i]` (`field` for one input)
    input_names: Sequence[str] | None = None
    # every token's final hidden state, unpooled and as they are (TEI's `/embed_all`; `normalize` and
    # `dimensions` do not apply), in `Embedding.tokens`
    token_embeddings: bool = False

    def input_name(self, i: int) -> str:
        """How a refusal names input `i`."""
        if self.input_names is not None:
            return self.input_names[i]
        return f"{self.field}[{i}]" if len(self.inputs) > 1 else self.field


@dataclass(frozen=True)
class Embedding:
    """One input's answer: its pooled vector (empty for a token-embeddings request), or its tokens' hidden
    states."""

    vector: list[float]
    num_prompt_tokens: int
    tokens: list[list[float]] | None = None  # a token-embeddings request's: one vector per prompt token


def inputs_of(given: str | list, field: str) -> list[str | list[int]]:
    """A request's inputs field (a text, texts, token ids, or lists of them) as a list of inputs, or a 422
    naming `field` when it or one of its inputs is empty."""
    if isinstance(given, str):
        items: list = [given]
    elif given and all(isinstance(t, int) for t in given):
        items = [given]  # one input of token ids
    else:
        items = list(given)
    if not items:
        raise validation_error(f"`{field}` must not be an empty list", field)
    for i, x in enumerate(items):
        if not x:
            where = field if len(items) == 1 else f"{field}[{i}]"
            raise validation_error(f"`{where}` must not be empty", field)
    return items


def pooling_spec(service: InferenceService, kind: str = "embed") -> PoolingSpec:
    """The served model's pooling spec; a 422 saying what it serves when it is not a pooling model of
    `kind` (it generates, or it is the other kind)."""
    spec = service.engine.model_info.pooling
    wanted = "scores (reranking, classification)" if kind == "classify" else POOLING_OUTPUTS[kind]
    if spec is None:
        raise validation_error(
            f"the model {service.model_name} generates text (POST /generate, /v1/chat/completions, ...): it is "
            f"not a pooling model, {wanted} are not served (launch a sentence-transformers folder, a "
            "*ForSequenceClassification one, or use --runner pooling)"
        )
    if spec.kind != kind:
        raise validation_error(
            f"the model {service.model_name} serves {serves(spec)}: {wanted} are not served"
        )
    return spec


def prompt_text(spec: PoolingSpec, name: str | None, field: str = "prompt_name") -> str:
    """sentence-transformers' prompt `name` (the model's default where None), or a 422 naming `field`."""
    name = spec.default_prompt_name if name is None else name
    if name is None:
        return ""
    if name not in spec.prompts:
        known = ", ".join(sorted(spec.prompts)) or "none"
        raise validation_error(f"`{field}` {name!r} is not one of the model's prompts ({known})", field)
    return spec.prompts[name]


def output_width(spec: PoolingSpec, req: EmbedRequest) -> int:
    """The width of the vectors answered: the model's (its `truncate_dim` where it has one) or the request's
    `dimensions`, which only a Matryoshka model takes (a 422 naming the field otherwise)."""
    n = req.dimensions
    if n is None:
        return spec.default_dimensions or spec.dimension
    if not spec.matryoshka:
        raise validation_error(
            f"`{req.dimensions_field}` is not served: the model does not declare Matryoshka dimensions "
            "(matryoshka_dimensions in its config, or sentence-transformers' truncate_dim)",
            req.dimensions_field,
        )
    if not spec.allows_dimensions(n):
        allowed = ", ".join(map(str, spec.matryoshka_dimensions)) or f"1 to {spec.dimension}"
        raise validation_error(
            f"`{req.dimensions_field}` must be one of {allowed}. Given: {n}", req.dimensions_field
        )
    return n


def finished(vector: Sequence[float], width: int, normalize: bool) -> list[float]:
    """`vector` cut to its first `width` values, then L2-normalized where asked."""
    vector = [float(x) for x in vector[:width]]
    if not normalize:
        return vector
    norm = math.sqrt(sum(x * x for x in vector)) or 1.0
    return [x / norm for x in vector]


async def token_ids(service: InferenceService, req: EmbedRequest) -> list[list[int]]:
    """Each input's tokens (texts with the request's prompt before them, tokenized off the event loop),
    truncated as asked, or a 422 naming the field for one too long."""
    limit = service.engine.config.max_input_tokens
    vocab = service.engine.model_info.vocab_size
    ids = []
    for i, x in enumerate(req.inputs):
        where = req.input_name(i)
        if isinstance(x, str):
            tokens = await service.encode(req.prompt + x)
        else:
            if any(not 0 <= t < vocab for t in x):
                raise validation_error(f"`{where}`: token ids must be in [0, {vocab})", req.field)
            tokens = list(x)
        if not tokens:
            raise validation_error(f"`{where}` must not be empty", req.field)
        if len(tokens) > limit:
            if req.truncate is None:
                raise validation_error(f"{too_many_input_tokens(len(tokens), limit)} in `{where}`", req.field)
            tokens = tokens[:limit] if req.truncate == "right" else tokens[-limit:]
        ids.append(tokens)
    return ids


async def embed(
    service: InferenceService,
    http: Request,
    tracker: RequestTracker,
    req: EmbedRequest,
    events: Callable[[EngineRequest, SamplingParams], AsyncIterator[TokenEvent]],
) -> list[Embedding]:
    """Every input of `req` pooled by the engine (in input order); `tracker` finishes here, with the error
    where one comes. `events`: the service's stream of one engine request, the generation's (metrics,
    traces, its errors as `ApiError`); a client that leaves cancels them."""
    try:
        spec = pooling_spec(service, req.kind)
        width = output_width(spec, req)
        prompts = await token_ids(service, req)
        requests = []
        for ids in prompts:
            try:
                request = service.engine.validate(
                    ids, POOLING_PARAMS, pooling=True, token_embeddings=req.token_embeddings
                )
            except ValidationError as exc:
                raise validation_error(str(exc), exc.param or req.field) from None
            requests.append(replace(request, tenant=tenant_of(http)))
        merged = sse.merge([events(r, POOLING_PARAMS) for r in requests])
        vectors: list[list[float] | None] = [None] * len(requests)
        tokens: list[list[list[float]] | None] = [None] * len(requests)

        async def collect() -> None:
            try:
                async for i, event in merged:
                    if event.embedding is not None:
                        vectors[i] = finished(event.embedding, width, req.normalize)
                    if event.token_embeddings is not None:
                        tokens[i] = [list(t) for t in event.token_embeddings]
            finally:
                await merged.aclose()

        await sse.cancel_on_disconnect(http, collect())
    except BaseException as exc:
        tracker.finish(exc)
        raise
    tracker.finish()
    return [Embedding(v or [], len(ids), t) for v, t, ids in zip(vectors, tokens, prompts, strict=True)]
