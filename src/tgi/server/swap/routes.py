"""Operator routes: `POST /admin/model` swaps the served model (`tgi.server.swap.swapper`). Served only with
`--enable-model-swap`, which needs `--admin-api-key`: the key check (`tgi.server.http.auth`) lets only the admin key
through; only the models of `--swappable-models` may be loaded (none when it is empty). Every refusal here names flags, never a path."""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel

from tgi.server.http.errors import ApiError

router = APIRouter()


class SwapRequest(BaseModel):
    model_id: str
    revision: str | None = None


@router.post("/admin/model")
async def swap_model(req: SwapRequest, request: Request) -> dict:
    """Load `model_id` beside the served model, route new requests to it, let the requests in flight finish
    on the old one, then free it (`tgi.server.swap.swapper`)."""
    settings = request.app.state.service.settings
    if not settings.enable_model_swap:
        raise ApiError(
            403, "swapping the model is off: start the server with --enable-model-swap", "forbidden"
        )
    if not settings.admin_api_key:
        raise ApiError(403, "swapping the model needs a server started with --admin-api-key", "forbidden")
    if req.model_id not in settings.swappable_models:  # none named: none may be loaded
        raise ApiError(403, "this model is not one of the server's --swappable-models", "forbidden")
    return await request.app.state.swapper.swap(req.model_id, req.revision)
