"""vLLM's prompt and output details on OpenAI's routes: `prompt_logprobs` (the prompt tokens' logprobs,
ranks and top alternatives, in vLLM's response shape) and `echo` on chat completions (the final assistant
message's content before the answer, as vLLM's chat route shows it)."""

from __future__ import annotations

from dataclasses import replace

from tgi.core.request import PromptToken
from tgi.core.sampling_params import SamplingParams
from tgi.server.http.errors import validation_error
from tgi.server.openai.format import token_label
from tgi.server.service.settings import ServerSettings
from tgi.server.validation.sampling import check_prompt_logprobs


def with_prompt_logprobs(req, base: SamplingParams, settings: ServerSettings) -> SamplingParams:
    """`base` asking for vLLM's `prompt_logprobs=k`: every prompt token's logprob and rank and the k most
    likely tokens at its position (k bounded by --max-top-n-tokens as `top_logprobs` is; only on a server
    started with --enable-prefill-logprobs, as TGI's `decoder_input_details`). vLLM refuses them streamed
    (k > 0) and sends them nowhere in a stream (k = 0): refused when streaming."""
    k = req.prompt_logprobs
    if k is None:
        return base
    if req.stream:
        raise validation_error("`prompt_logprobs` is not supported when streaming", "prompt_logprobs")
    if not 0 <= k <= settings.max_top_n_tokens:
        raise validation_error(
            f"`prompt_logprobs` must be >= 0 and <= {settings.max_top_n_tokens} (--max-top-n-tokens). Given: {k}",
            "prompt_logprobs",
        )
    check_prompt_logprobs("prompt_logprobs", settings)
    return replace(base, prompt_logprobs=True, prompt_top_n_tokens=k)


def prompt_logprobs_body(tokens: tuple[PromptToken, ...], as_ids: bool = False) -> list[dict | None]:
    """vLLM's `prompt_logprobs`: one entry per prompt token, None for the first (nothing predicts it), else
    `{token id: {"logprob", "rank", "decoded_token"}}` holding the prompt token, then the top alternatives
    most likely first (rank 1, 2...; the prompt token once if it is one of them)."""
    out: list[dict | None] = []
    for token in tokens:
        if token.logprob is None:
            out.append(None)
            continue
        entry = {str(token.id): _logprob(token.id, token.text, token.logprob, token.rank, as_ids)}
        for rank, top in enumerate(token.top_tokens, start=1):
            entry.setdefault(str(top.id), _logprob(top.id, top.text, top.logprob, rank, as_ids))
        out.append(entry)
    return out


def _logprob(token_id: int, text: str, logprob: float, rank: int | None, as_ids: bool) -> dict:
    return {"logprob": logprob, "rank": rank, "decoded_token": token_label(token_id, text, as_ids)}


def chat_echo(req) -> str | None:
    """vLLM's `echo` on chat completions: the last message's content, shown before the answer, when that
    message has the answer's role (the assistant's; with `add_generation_prompt: false`, the role of the last
    message itself, so any last message); its text parts joined by newlines, as vLLM joins them. None: nothing
    to show."""
    if not req.echo:
        return None
    last = req.messages[-1]
    role = last.role if req.add_generation_prompt is False else "assistant"
    if last.role != role:
        return None
    content = last.content
    if isinstance(content, list):
        content = "\n".join(p.text or "" for p in content if p.type == "text")
    return content or None
