"""`POST /flush_cache` (SGLang's name, which vllm-router calls on every worker) and `POST /reset_prefix_cache`
(vLLM's): empty the prefix cache between two engine steps. Requests in flight keep the blocks they hold; no
later request reads a block cached before. With KV events on, subscribers get `AllBlocksCleared`.

An operator route (`tgi.server.http.auth`): only `--admin-api-key` opens it on a server that has one; on a
server without, it is behind the inference key when there is one, as every other route.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

router = APIRouter()


@router.post("/flush_cache")
@router.post("/reset_prefix_cache")
async def flush_cache(request: Request) -> JSONResponse:
    """`{"flushed_blocks": n}`: the blocks dropped from the prefix cache."""
    service = request.app.state.service
    dropped = await service.current_engine.reset_prefix_cache()
    return JSONResponse({"flushed_blocks": dropped})
