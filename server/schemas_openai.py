"""OpenAI's request schemas (chat completions, completions); responses are built in `openai_format`.

Extensions accepted as vLLM and TGI do: `top_k`, `repetition_penalty`, `min_tokens`, `ignore_eos`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class ContentPart(_Strict):
    type: str
    text: str | None = None


class ChatMessage(_Strict):
    role: str
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[Any] | None = None
    tool_call_id: str | None = None

    def template_dict(self) -> dict:
        content = self.content
        if isinstance(content, list):
            content = "".join(p.text or "" for p in content if p.type == "text")
        out: dict = {"role": self.role, "content": content or ""}
        for key in ("name", "tool_calls", "tool_call_id"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


class StreamOptions(_Strict):
    include_usage: bool = False


class _Sampling(_Strict):
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
    # extensions (vLLM, TGI)
    top_k: int | None = None
    repetition_penalty: float | None = None
    min_tokens: int | None = None
    ignore_eos: bool = False
    user: str | None = None

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

    @property
    def max_new_tokens(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


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
