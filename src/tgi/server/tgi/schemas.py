"""TGI's request and response schemas (`GenerateParameters`, `GenerateResponse`, `StreamResponse`, `Info`...).

Requests are strict (a string where a number belongs is a 422, as serde gives it); a field TGI defines and
this server does not serve is refused by name, one TGI does not define is logged and dropped
(`tgi.server.validation.fields`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from tgi.server.validation.fields import RequestModel


class GenerateParameters(RequestModel):
    best_of: int | None = Field(
        None, description="Generate best_of sequences and return the one with the highest log-probability"
    )
    temperature: float | None = None
    repetition_penalty: float | None = None
    frequency_penalty: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    typical_p: float | None = None
    do_sample: bool = False
    max_new_tokens: int | None = Field(None, description="Default: max_total_tokens - input tokens")
    return_full_text: bool | None = None
    stop: list[str] = Field(default_factory=list)
    truncate: int | None = None
    watermark: bool = False
    details: bool = False
    decoder_input_details: bool = False
    seed: int | None = None
    top_n_tokens: int | None = None
    grammar: dict | None = Field(
        None, description='{"type": "json" | "json_schema" | "regex", "value": ...}: the output must match it'
    )
    adapter_id: str | None = Field(
        None, description="A LoRA adapter loaded with --lora-adapters; absent or the model's name: none"
    )
    cache_salt: str | None = Field(
        None,
        min_length=1,
        description="vLLM's: only requests with the same salt share prefix-cache blocks; absent: the unsalted",
    )


class GenerateRequest(RequestModel):
    inputs: str
    parameters: GenerateParameters = Field(default_factory=GenerateParameters)


class CompatGenerateRequest(GenerateRequest):
    stream: bool = False


class Token(BaseModel):
    id: int
    text: str
    logprob: float | None = None
    special: bool


class PrefillToken(BaseModel):
    id: int
    text: str
    logprob: float | None = None


class BestOfSequence(BaseModel):
    generated_text: str
    finish_reason: str
    generated_tokens: int
    seed: int | None = None
    prefill: list[PrefillToken]
    tokens: list[Token]
    top_tokens: list[list[Token]] = Field(default_factory=list)


class Details(BaseModel):
    finish_reason: str  # "length" | "eos_token" | "stop_sequence"
    generated_tokens: int
    seed: int | None = None
    prefill: list[PrefillToken]
    tokens: list[Token]
    top_tokens: list[list[Token]] = Field(default_factory=list)
    best_of_sequences: list[BestOfSequence] | None = None


class GenerateResponse(BaseModel):
    generated_text: str
    details: Details | None = None


class StreamDetails(BaseModel):
    finish_reason: str
    generated_tokens: int
    seed: int | None = None
    input_length: int


class StreamResponse(BaseModel):
    index: int
    token: Token
    top_tokens: list[Token] = Field(default_factory=list)
    generated_text: str | None = None
    details: StreamDetails | None = None


class SimpleToken(BaseModel):
    id: int
    text: str
    start: int
    stop: int


class ErrorResponse(BaseModel):
    error: str
    error_type: str


class QuantizationDetails(BaseModel):
    weight_format: str = Field(description='the format of the quantized weights, e.g. "gptq-int4", "fp8"')
    source: str = Field(description='"checkpoint" (read as stored) or "load-time" (quantized while loading)')
    num_linears: int = Field(description="linear layers computed with quantized weights")
    kernel: str = Field(description="the kernel(s) that compute them")
    description: str


class Info(BaseModel):
    model_id: str
    model_sha: str | None = None
    model_dtype: str
    model_device_type: str
    model_pipeline_tag: str | None = "text-generation"
    max_concurrent_requests: int
    max_best_of: int
    max_stop_sequences: int
    max_input_tokens: int
    max_input_length: int  # the legacy name of max_input_tokens
    max_total_tokens: int
    max_batch_prefill_tokens: int
    max_batch_total_tokens: int
    max_top_n_tokens: int
    max_client_batch_size: int = 1
    validation_workers: int = 1
    router: str = "tgi"
    version: str
    sha: str | None = None
    docker_label: str | None = None
    backend: str
    prefix_caching: bool = Field(
        default=False, description="whether the KV blocks of prompts already seen are reused"
    )
    kv_cache_dtype: str = Field(
        default="auto",
        description="what the KV cache stores (--kv-cache-dtype): auto (the model's dtype), or int8, fp8_e4m3fn, "
        "fp8_e5m2 (one byte a value with a float32 scale per token and kv head); max_batch_total_tokens is how "
        "many tokens it holds",
    )
    deterministic: bool = Field(
        default=False,
        description="batch-invariant kernels (--deterministic): a request's tokens do not depend on what "
        "runs beside it",
    )
    speculate: int = Field(default=0, description="draft tokens verified per decode step (0: no speculation)")
    speculation: str | None = Field(
        default=None,
        description='who guesses them: "ngram", "draft-model" or "medusa" (None: no speculation)',
    )
    pooling: dict[str, Any] | None = Field(
        default=None,
        description="a pooling model (embeddings, scores or sparse embeddings): its pooling mode, "
        "whether its vectors are normalized, their width, the Matryoshka widths it takes (null: none; [] any up "
        "to its width), its prompts' names, its kind (embed; classify: a classifier, whose labels are listed; "
        "sparse: a SPLADE model), the routes it serves (all POST); null for a model that generates text",
    )
    kernels: dict[str, str] = Field(
        default_factory=dict, description="the backend's kernels and the implementation each runs with here"
    )
    quantize: str | None = Field(
        default=None,
        description="the weight quantization in use, as a --quantize value (gptq, awq, fp8, eetq, ...; "
        '"gguf" for a GGUF file\'s blocks); None: dense weights',
    )
    quantization: QuantizationDetails | None = Field(
        default=None, description="how the quantized weights are stored and computed"
    )
