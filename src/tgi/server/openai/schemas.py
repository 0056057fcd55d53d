"""OpenAI's request schemas (chat completions, completions); responses are built in `tgi.server.openai.format`.

`logit_bias` is served (added to the logits by the sampler); `echo` on completions prepends the prompt
(and its tokens' logprobs when `logprobs` is asked, which needs `--enable-prefill-logprobs`).

Extensions accepted as vLLM and TGI do: `top_k`, `repetition_penalty`, `min_tokens`, `ignore_eos`,
`stop_token_ids`, `include_stop_str_in_output`, `guided_json`, `guided_regex`, `guided_choice`, `guided_grammar`,
`structured_outputs`, `tool_prompt`,
`cache_salt`; vLLM's and llama.cpp's sampling fields (`min_p`, `typical_p`, `top_n_sigma`, DRY, XTC, `bad_words`,
`allowed_token_ids`, `logits_processors`: `tgi.server.validation.sampling_fields`). Fields OpenAI or vLLM define that are not served here are
refused by name (`tgi.server.validation.fields`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

from pydantic import Field

from tgi.server.chat.template import TemplateOptions, template_options
from tgi.server.images.sources import image_part
from tgi.server.openai.prediction import Prediction
from tgi.server.validation.fields import NEUTRAL, RequestModel
from tgi.server.validation.sampling_fields import SamplingExtensions

# OpenAI's and vLLM's request fields that this server does not serve yet, with the values that ask for the
# default behaviour (which is what it does). Chat completions serve `tools`, `tool_choice`,
# `parallel_tool_calls`, TGI's `tool_prompt` and the chat template's fields (`reasoning_effort`,
# `chat_template`...: declared on `ChatCompletionRequest`); completions refuse them.
_OPENAI_UNSERVED: dict[str, tuple[Any, ...]] = {
    "tools": NEUTRAL,
    "tool_choice": (None, "none"),
    "parallel_tool_calls": (None, True),
    "functions": NEUTRAL,
    "function_call": (None, "none"),
    "audio": NEUTRAL,
    "modalities": (None, ["text"]),
    "prediction": NEUTRAL,
    "reasoning_effort": NEUTRAL,
    "verbosity": NEUTRAL,
    "web_search_options": NEUTRAL,
    "service_tier": (None, "auto", "default"),
    "store": (None, False),
    "metadata": NEUTRAL,
    "prompt_cache_key": NEUTRAL,
    "best_of": (None, 1),
    # vLLM's extensions
    # how vLLM runs guided_*: the backend (ours is llguidance) and JSON's whitespace (ours: single spaces)
    "guided_decoding_backend": NEUTRAL,
    "guided_whitespace_pattern": NEUTRAL,
    "chat_template": NEUTRAL,
    "chat_template_kwargs": NEUTRAL,
    "continue_final_message": (None, False),
    "add_generation_prompt": (None, True),
    "documents": NEUTRAL,
    # TGI's /v1 extensions
    "tool_prompt": NEUTRAL,
    "guideline": NEUTRAL,
    "adapter_id": NEUTRAL,
}


class ImageUrl(RequestModel):
    """An image content part's image: a `data:` URL, an `http(s)` URL (fetched: `tgi.server.images.fetch`),
    or a `file:` URL under --allowed-local-media-path. `detail` other than `auto` is refused (the model's
    processor decides the resolution)."""

    url: str
    KNOWN: ClassVar = {"detail": (None, "auto")}


class ContentPart(RequestModel):
    type: str
    text: str | None = None
    image_url: ImageUrl | None = None
    KNOWN: ClassVar = {"input_audio": NEUTRAL, "file": NEUTRAL}

    def refusals(self) -> Iterator[tuple[str, str]]:
        if self.type not in ("text", "image_url"):
            yield (
                "type",
                f"`{self.type}` content is not supported: this server takes text and image_url parts",
            )
        elif self.type == "image_url" and self.image_url is None:
            yield "image_url", "is required by an `image_url` part"
        elif self.type == "text" and self.image_url is not None:
            yield "image_url", "cannot be given in a `text` part"


class ChatMessage(RequestModel):
    role: str
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[Any] | None = None
    tool_call_id: str | None = None
    KNOWN: ClassVar = {"function_call": NEUTRAL, "audio": NEUTRAL, "refusal": NEUTRAL}

    def template_dict(self, where: str) -> dict:
        """The message as chat templates take it: text parts joined; with images, a list of `text` and
        image parts in order (`image_part`, named by their field under `where`, this message's path)."""
        content = self.content
        if isinstance(content, list) and any(p.type == "image_url" for p in content):
            content = [
                image_part(p.image_url.url, f"{where}.content[{j}].image_url.url")
                if p.type == "image_url" and p.image_url is not None
                else {"type": "text", "text": p.text or ""}
                for j, p in enumerate(content)
            ]
        elif isinstance(content, list):
            content = "".join(p.text or "" for p in content if p.type == "text")
        out: dict = {"role": self.role, "content": content or ""}
        for key in ("name", "tool_calls", "tool_call_id"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


class StreamOptions(RequestModel):
    include_usage: bool = False
    KNOWN: ClassVar = {"continuous_usage_stats": (None, False)}


class StructuredOutputs(RequestModel):
    """vLLM's `structured_outputs` (its only spelling since vLLM 0.12): one of `json`, `regex`, `choice`,
    `grammar`, `json_object`, `structural_tag`, and options (`tgi.server.validation.grammars`)."""

    json_: dict | str | bool | None = Field(default=None, alias="json")
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    structural_tag: str | dict | None = None
    # one grammar engine here (llguidance), which never falls back to another: either value holds
    disable_fallback: bool = False
    # JSON written without whitespace (True) or with this server's single spaces after `,` and `:`
    disable_any_whitespace: bool = False
    # every schema is generated closed here (`tgi.core.guided.grammar.closed`): either value passes
    disable_additional_properties: bool = False
    KNOWN: ClassVar = {"whitespace_pattern": NEUTRAL}


class _Sampling(SamplingExtensions):
    model: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    logit_bias: dict[str, float] | None = None  # token id (as a string) -> bias in [-100, 100]
    # extensions (vLLM, TGI)
    use_beam_search: bool = False  # vLLM's beam search: `n` beams (`tgi.server.service.beam_search`)
    length_penalty: float | None = None  # its score's length exponent (1 when None)
    top_k: int | None = None
    repetition_penalty: float | None = None
    min_tokens: int | None = None
    ignore_eos: bool = False
    stop_token_ids: list[int] | None = None
    include_stop_str_in_output: bool = False
    user: str | None = None  # an end-user id: no effect on generation, in OpenAI's API either
    # guided decoding (`tgi.server.validation.grammars`): OpenAI's, and vLLM's extensions
    response_format: dict | None = None
    guided_json: dict | str | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    structured_outputs: StructuredOutputs | None = None
    # vLLM's: the prompt's last k tokens (-1: as many as an input may have); the queue's order, lower first
    # (with --scheduling-policy priority)
    truncate_prompt_tokens: int | None = None
    priority: int = 0
    return_tokens_as_token_ids: bool = False  # vLLM's: logprobs name tokens `token_id:<id>`
    # vLLM's prompt and output details (`tgi.server.openai.prompt_details`): the prompt tokens' logprobs with
    # their ranks and k alternatives; special tokens in the text, and spaces between them
    prompt_logprobs: int | None = None
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    # vLLM's: only requests with the same salt share prefix-cache blocks (none: with the unsalted only)
    cache_salt: str | None = Field(default=None, min_length=1)
    KNOWN: ClassVar = _OPENAI_UNSERVED

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage

    @property
    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    # tool calling (`tgi.server.chat.tools`); one call per choice at most, which `parallel_tool_calls` allows
    # either way
    tools: list[Any] | None = None
    tool_choice: str | dict | None = None
    parallel_tool_calls: bool | None = None
    tool_prompt: str | None = None  # TGI's: the instruction shown before the tools
    echo: bool = False  # vLLM's: the last message's content before the answer (`prompt_details.chat_echo`)
    prediction: Prediction | None = None  # OpenAI's Predicted Outputs (`tgi.server.openai.prediction`)
    # how the chat template is applied (`tgi.server.chat.template`: vLLM's fields and semantics; OpenAI's
    # `reasoning_effort` as vLLM passes it, a template variable)
    reasoning_effort: str | None = None
    chat_template_kwargs: dict[str, Any] | None = None
    add_generation_prompt: bool | None = None
    continue_final_message: bool | None = None
    chat_template: str | None = None  # with --trust-request-chat-template only
    documents: list[dict] | None = None  # likewise

    @property
    def max_new_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    def template_options(self, trusted: bool) -> TemplateOptions:
        """How the chat template is applied (`trusted`: --trust-request-chat-template)."""
        return template_options(
            trusted,
            variables=self.chat_template_kwargs,
            reasoning_effort=self.reasoning_effort,
            add_generation_prompt=self.add_generation_prompt,
            continue_final_message=self.continue_final_message,
            chat_template=self.chat_template,
            documents=self.documents,
        )

    def template_messages(self) -> list[dict]:
        """The messages as chat templates take them, their images as `image_part`s named by their field."""
        return [m.template_dict(f"messages[{i}]") for i, m in enumerate(self.messages)]


class CompletionRequest(_Sampling):
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = 16  # OpenAI's default for completions
    logprobs: int | None = None  # number of alternatives per token, as OpenAI's legacy completions
    echo: bool = False
    suffix: str | None = None

    @property
    def max_new_tokens(self) -> int | None:
        return self.max_tokens

    def prompts(self) -> list[str | list[int]]:
        """One entry per prompt: a string, or token ids."""
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if p and all(isinstance(x, int) for x in p):
            return [list(p)]  # type: ignore[arg-type]
        return list(p)  # type: ignore[arg-type]
