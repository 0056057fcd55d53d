"""Loading and unloading LoRA adapters at run time, as vLLM's routes do (`--allow-runtime-lora-updating`):

- `POST /v1/load_lora_adapter {"lora_name", "lora_path"}`: reads the PEFT adapter in the server-local folder
  `lora_path` and serves it as `lora_name` (TGI's `adapter_id`, OpenAI's `model`) from the next step on; the
  engine thread loads it between two steps, never during one, and the event loop only awaits it. 200 with a
  plain-text line; 400 with the reason for an adapter that does not fit the model (another model's shapes, a
  module it cannot adapt, a PEFT setting not served, no such folder) or an id in use (the base model's
  name and `tgi` included); `load_inplace: true` (replace a loaded adapter's weights under requests in
  flight) is refused by name with a 422.
- `POST /v1/unload_lora_adapter {"lora_name"}`: from the next step on no new request may name the adapter
  (`/v1/models` drops it; a request naming it is OpenAI's 404 `model_not_found`, TGI's 422); the requests
  admitted before finish with it, and the route answers once they have and its weights are dropped (it
  waits, it does not fail them). 404 when no adapter of that id is loaded.

Both are refused with a 403 naming the flag unless the server was started with it (which needs
`--admin-api-key` and `--lora-root`): whoever can call them changes the model's output for every client. Only
the admin key opens them (`tgi.server.http.auth`). `lora_path`, symlinks followed, must lie inside `--lora-root`
(else a 403 that does not echo it); a refusal names no path and no file content (the log has the detail,
under the request id the answer gives); `--max-loras` and `--max-lora-rank` are refused by name (400).
"""

from __future__ import annotations

import os
from typing import ClassVar

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse

from tgi.core.config import ConfigError
from tgi.server.http.errors import ApiError, logged_refusal
from tgi.server.lora.adapters import BASE_ALIAS
from tgi.server.validation.fields import RequestModel, check_fields

router = APIRouter(tags=["OpenAI"])


class LoadLoRAAdapterRequest(RequestModel):
    lora_name: str
    lora_path: str
    KNOWN: ClassVar = {"load_inplace": (None, False)}


class UnloadLoRAAdapterRequest(RequestModel):
    lora_name: str
    KNOWN: ClassVar = {"lora_int_id": (None,)}  # vLLM's numeric id: adapters here are named only


def _allowed(request: Request):
    service = request.app.state.service
    if not service.settings.allow_runtime_lora_updating:
        raise ApiError(
            403,
            "loading LoRA adapters at run time is off: start the server with --allow-runtime-lora-updating "
            "(env ALLOW_RUNTIME_LORA_UPDATING=true)",
            "forbidden",
        )
    if not service.settings.admin_api_key:
        raise ApiError(403, "the LoRA routes need a server started with --admin-api-key", "forbidden")
    return service


def inside_root(path: str, root: str | None) -> str | None:
    """`path` resolved (symlinks followed) when it lies inside the folder `root` (a real path), else None."""
    if root is None:
        return None
    resolved = os.path.realpath(path)
    return resolved if os.path.commonpath([resolved, root]) == root else None


def _bad_request(message: str, param: str) -> ApiError:
    return ApiError(400, message, "invalid_request_error", param=param)


@router.post("/v1/load_lora_adapter", response_class=PlainTextResponse)
async def load_lora_adapter(req: LoadLoRAAdapterRequest, request: Request) -> PlainTextResponse:
    """Serve the PEFT adapter in `lora_path` as `lora_name` (see the module docstring)."""
    service = _allowed(request)
    check_fields(req)
    name = req.lora_name
    if not name.strip() or name in (service.model_name, BASE_ALIAS):
        raise _bad_request(f"'{name}' cannot name a LoRA adapter: it names the base model", "lora_name")
    path = inside_root(req.lora_path, service.settings.lora_root)
    if path is None:
        raise ApiError(
            403, "`lora_path` is not inside the server's --lora-root", "forbidden", param="lora_path"
        )
    try:
        await service.current_engine.load_lora_adapter(name, path)
    except ConfigError as exc:  # does not fit, or a limit: its path-free reason; the rest in the log
        reason = getattr(exc, "reason", "it cannot be served")
        raise logged_refusal(
            400, f"cannot load the LoRA adapter '{name}': {reason}", exc, "invalid_request_error", "lora_path"
        ) from None
    except ValueError as exc:  # the id is taken (the message names only the id)
        raise _bad_request(str(exc), "lora_name") from None
    return PlainTextResponse(f"Success: LoRA adapter '{name}' loaded")


@router.post("/v1/unload_lora_adapter", response_class=PlainTextResponse)
async def unload_lora_adapter(req: UnloadLoRAAdapterRequest, request: Request) -> PlainTextResponse:
    """Stop serving adapter `lora_name`, once its requests in flight have finished (module docstring)."""
    service = _allowed(request)
    check_fields(req)
    try:
        await service.current_engine.unload_lora_adapter(req.lora_name)
    except KeyError:
        raise ApiError(
            404,
            f"no LoRA adapter '{req.lora_name}' is loaded",
            "not_found",
            param="lora_name",
            code="not_found",
        ) from None
    return PlainTextResponse(f"Success: LoRA adapter '{req.lora_name}' unloaded")
