"""Admin routes, served only when the server has an `--api-key` (which they need, as every route does):
without one, anyone could swap the model, so they answer 403 saying why."""

from __future__ import annotations

from fastapi import APIRouter, Request
from pydantic import BaseModel

from tgi.server.errors import ApiError

router = APIRouter()


class SwapRequest(BaseModel):
    model_id: str
    revision: str | None = None


@router.post("/admin/model")
async def swap_model(req: SwapRequest, request: Request) -> dict:
    """Load `model_id` beside the served model, route new requests to it, let the requests in flight finish
    on the old one, then free it (`tgi.server.model_swap`)."""
    service = request.app.state.service
    if not service.settings.api_key:
        raise ApiError(
            403, "the admin routes are served only when the server is started with --api-key", "forbidden"
        )
    return await request.app.state.swapper.swap(req.model_id, req.revision)
