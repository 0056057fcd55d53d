"""One streamed request against an OpenAI-compatible (`/v1/completions`; `/v1/chat/completions` with an image
part when the request carries an image) or TGI (`/generate_stream`; the image as a markdown image in
`inputs`) server, timed at every streamed token. Only loopback URLs are accepted: this is a load generator for servers on
this machine, never for someone else's."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from tgi.benchmarks.prompts import BenchPrompt

if TYPE_CHECKING:
    import httpx

APIS = ("openai", "tgi")


async def stream_chat(
    client: httpx.AsyncClient, url: str, body: dict, run: Any, usage: Callable[[dict], None]
) -> None:
    """Stream one chat completion into `run` (an object with `start`, `end`, `ttft`, `text`, `error`): the reply's
    text, the time to its first choice, `usage(chunk["usage"])` for the chunk that carries it; an HTTP error, a
    server error event or a failed connection goes to `run.error`; `run.end` is set however it ends."""
    try:
        async with client.stream("POST", url + "/v1/chat/completions", json=body) as response:
            if response.status_code != 200:
                text = (await response.aread()).decode(errors="replace")[:300]
                run.error = f"HTTP {response.status_code}: {text}"
                return
            async for line in response.aiter_lines():
                if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                    continue
                chunk = json.loads(line[5:])
                if chunk.get("error"):
                    run.error = f"server error: {str(chunk['error'])[:300]}"
                    return
                for choice in chunk.get("choices") or []:
                    if run.ttft is None:
                        run.ttft = time.perf_counter() - run.start
                    run.text += (choice.get("delta") or {}).get("content") or ""
                if chunk.get("usage"):
                    usage(chunk["usage"])
    except Exception as exc:  # connection refused, reset, malformed stream
        run.error = f"{type(exc).__name__}: {exc}"
    finally:
        run.end = time.perf_counter()


def check_loopback(url: str) -> str:
    """Return `url` without a trailing slash; raise `ValueError` unless it is http(s) on a loopback host."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r}: expected http://HOST:PORT")
    host = parts.hostname
    loopback = host == "localhost"
    if not loopback:
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
    if not loopback:
        raise ValueError(f"{url!r}: only loopback servers (localhost, 127.0.0.1, ::1) can be benchmarked")
    return url.rstrip("/")


@dataclass
class RequestResult:
    """What one request measured. Times are `time.perf_counter()` seconds."""

    ok: bool
    start: float
    end: float = 0.0
    ttft: float | None = None  # to the first streamed token
    itls: list[float] = field(default_factory=list)  # gaps between successive streamed tokens
    prompt_tokens: int | None = None  # as the server reports it (usage / details), when it does
    completion_tokens: int = 0  # the server's count when reported, else the streamed token events
    error: str | None = None

    @property
    def e2e(self) -> float:
        return self.end - self.start


def openai_payload(prompt: BenchPrompt, model: str | None, ignore_eos: bool) -> dict:
    body = {
        "prompt": prompt.text,
        "max_tokens": prompt.max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if ignore_eos:  # vLLM's extension; our server and llama.cpp accept it
        body["ignore_eos"] = True
    if model:
        body["model"] = model
    return body


def openai_chat_payload(prompt: BenchPrompt, model: str | None, ignore_eos: bool, image_url: str) -> dict:
    """One user message of the prompt's text and one `image_url` part, streamed with usage."""
    body = openai_payload(prompt, model, ignore_eos)
    text = body.pop("prompt")
    image = {"type": "image_url", "image_url": {"url": image_url}}
    body["messages"] = [{"role": "user", "content": [{"type": "text", "text": text}, image]}]
    return body


def tgi_payload(prompt: BenchPrompt, image_url: str | None = None) -> dict:
    # TGI's API has no ignore_eos: outputs may end early at EOS; `details` reports the true count.
    params = {"max_new_tokens": prompt.max_tokens, "do_sample": False, "details": True}
    inputs = prompt.text if image_url is None else f"![]({image_url}){prompt.text}"
    return {"inputs": inputs, "parameters": params}


async def send(
    client: httpx.AsyncClient,
    base_url: str,
    api: str,
    prompt: BenchPrompt,
    *,
    model: str | None = None,
    ignore_eos: bool = True,
    timeout: float = 600.0,
    image_url: str | None = None,
) -> RequestResult:
    """Send one streamed request and time it; never raises for a failed request (`ok=False`, `error`).
    `image_url`: one image sent with the prompt (OpenAI: a chat message's `image_url` part; TGI: a
    markdown image before the text)."""
    result = RequestResult(ok=False, start=time.perf_counter())
    try:
        stream = _stream(client, base_url, api, prompt, model, ignore_eos, result, image_url)
        await asyncio.wait_for(stream, timeout)
        result.ok = result.error is None and result.completion_tokens > 0
        if result.ok is False and result.error is None:
            result.error = "no token was streamed"
    except (TimeoutError, asyncio.TimeoutError):
        result.error = f"timed out after {timeout:g}s"
    except Exception as exc:  # connection refused, reset, malformed stream...
        result.error = f"{type(exc).__name__}: {exc}"
    result.end = time.perf_counter()
    return result


async def _stream(
    client: httpx.AsyncClient,
    base_url: str,
    api: str,
    prompt: BenchPrompt,
    model: str | None,
    ignore_eos: bool,
    result: RequestResult,
    image_url: str | None = None,
) -> None:
    chat = api == "openai" and image_url is not None
    if chat:
        body = openai_chat_payload(prompt, model, ignore_eos, image_url)
        url = base_url + "/v1/chat/completions"
    elif api == "openai":
        url, body = base_url + "/v1/completions", openai_payload(prompt, model, ignore_eos)
    elif api == "tgi":
        url, body = base_url + "/generate_stream", tgi_payload(prompt, image_url)
    else:
        raise ValueError(f"unknown API {api!r}: choose from {', '.join(APIS)}")
    events = 0
    last = None
    reported = None
    async with client.stream("POST", url, json=body) as response:
        if response.status_code != 200:
            text = (await response.aread()).decode(errors="replace")[:300]
            result.error = f"HTTP {response.status_code}: {text}"
            return
        async for line in response.aiter_lines():
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            now = time.perf_counter()
            chunk = json.loads(data)
            if chunk.get("error"):
                result.error = f"server error: {str(chunk['error'])[:300]}"
                return
            if api == "openai":
                usage = chunk.get("usage")
                if usage:
                    result.prompt_tokens = usage.get("prompt_tokens")
                    reported = usage.get("completion_tokens")
                choices = chunk.get("choices") or []
                if chat:  # the role-only first delta and the finish-only last one are not tokens
                    is_token = any((c.get("delta") or {}).get("content") for c in choices)
                else:  # llama.cpp closes with an empty-text chunk carrying only the finish reason
                    is_token = any(c.get("text") or c.get("finish_reason") is None for c in choices)
            else:
                is_token = "token" in chunk
                details = chunk.get("details")
                if details:
                    result.prompt_tokens = details.get("input_length", result.prompt_tokens)
                    reported = details.get("generated_tokens")
            if not is_token:
                continue
            events += 1
            if last is None:
                result.ttft = now - result.start
            else:
                result.itls.append(now - last)
            last = now
    result.completion_tokens = reported if reported is not None else events
