"""The key check, per route class (a pure ASGI middleware, so that streamed responses and disconnects pass
through untouched; keys compared in constant time):

- open: `/health`, `/ping` (health checks) need no key;
- operator: `/admin/*`, `/v1/load_lora_adapter`, `/v1/unload_lora_adapter`, `/flush_cache` and
  `/reset_prefix_cache` accept only the admin key
  (`--admin-api-key`), never the inference key; a server without an admin key lets them through to the route,
  which refuses them (403 naming the flag), behind the inference key when there is one;
- inference: every other route needs an inference key (`--api-key`, or any key of `--api-key-file`) when
  there is one; the admin key does not open them (an operator who wants both holds both keys).

Tenants: each inference key belongs to a tenant (its name in `--api-key-file`, else one made from the key by
`key_tenant`), set on the request's scope (`tenant_of`). A tenant's requests share prefix-cache blocks only
with its own (`tgi.core.block_hash.request_cache_key`) and see only its own stored responses.

A key is presented as `Authorization: Bearer <key>` or, as Anthropic's clients send it, `x-api-key: <key>`
(either header, on every route class). A refusal is a 401 with `www-authenticate: Bearer`, in the route's
error shape."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from enum import Enum
from pathlib import Path

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from tgi.core.config import ConfigError
from tgi.server.http.errors import ApiError

#: the scope key the authenticated tenant is set under (`tenant_of`)
TENANT = "tgi.tenant"

OPEN_PATHS = frozenset({"/health", "/ping"})  # health checks (`/ping`: SageMaker's)
# and /admin/*; the prefix cache's reset under SGLang's (vllm-router's) name and vLLM's
OPERATOR_PATHS = frozenset(
    {"/v1/load_lora_adapter", "/v1/unload_lora_adapter", "/flush_cache", "/reset_prefix_cache"}
)


class RouteClass(Enum):
    OPEN = "open"
    OPERATOR = "operator"
    INFERENCE = "inference"


def route_class(path: str) -> RouteClass:
    """The class of the route at `path` (a trailing slash or a repeated one changes nothing)."""
    normal = "/" + "/".join(part for part in path.split("/") if part)
    if normal in OPEN_PATHS:
        return RouteClass.OPEN
    if normal in OPERATOR_PATHS or normal == "/admin" or normal.startswith("/admin/"):
        return RouteClass.OPERATOR
    return RouteClass.INFERENCE


def key_tenant(key: str) -> str:
    """The tenant of a key given without a name (`--api-key`, a line of `--api-key-file` with a key alone):
    made from the key (a short SHA-256 digest), never the key itself, which would reach logs and traces."""
    return "key-" + hashlib.sha256(key.encode()).hexdigest()[:16]


def tenant_of(request: Request) -> str | None:
    """The tenant whose key the request presented; None on a server without inference keys."""
    return request.scope.get(TENANT)


def read_api_key_file(path: str) -> tuple[tuple[str, str], ...]:
    """(key, tenant) for each key of an `--api-key-file`: one key per line, then optionally its tenant's name
    after whitespace; blank lines and lines starting with `#` are skipped. A key without a name is a tenant of
    its own (`key_tenant`); several keys may name one tenant. `ConfigError` (naming lines, never keys) for a
    file that cannot be read, holds no key, repeats a key, or has more than two fields on a line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"--api-key-file {path}: cannot be read ({exc})") from None
    pairs: list[tuple[str, str]] = []
    lines: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) > 2:
            raise ConfigError(
                f"--api-key-file {path}, line {number}: write a key, then optionally one tenant name"
            )
        key = fields[0]
        if key in lines:
            raise ConfigError(f"--api-key-file {path}, line {number}: the key of line {lines[key]} again")
        lines[key] = number
        pairs.append((key, fields[1] if len(fields) == 2 else key_tenant(key)))
    if not pairs:
        raise ConfigError(f"--api-key-file {path} holds no key (that would serve without authentication)")
    return tuple(pairs)


class BearerAuth:
    """Checks `Authorization: Bearer <key>` (or `x-api-key: <key>`) against the keys of the route's class
    (module docstring), and sets the tenant of the inference key presented on the scope (`tenant_of`)."""

    def __init__(
        self,
        app: ASGIApp,
        api_key: str | None = None,
        admin_api_key: str | None = None,
        api_keys: Sequence[tuple[str, str]] = (),
    ) -> None:
        """`api_key`: one inference key (its tenant made from it); `api_keys`: (key, tenant) pairs
        (`--api-key-file`)."""
        self.app = app
        given = ([(api_key, key_tenant(api_key))] if api_key is not None else []) + list(api_keys)
        inference = [(f"Bearer {key}".encode(), tenant) for key, tenant in given] or None
        admin = None if admin_api_key is None else [(f"Bearer {admin_api_key}".encode(), None)]
        self._expected: dict[RouteClass, list[tuple[bytes, str | None]] | None] = {
            RouteClass.OPEN: None,
            RouteClass.INFERENCE: inference,
            RouteClass.OPERATOR: admin if admin is not None else inference,
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        expected = self._expected[route_class(scope["path"])]
        if expected is None:
            await self.app(scope, receive, send)
            return
        match = _presented(scope, expected)
        if match is not None:
            if match[1] is not None:
                scope[TENANT] = match[1]
            await self.app(scope, receive, send)
            return
        error = ApiError(401, "Unauthorized", "unauthorized")
        await error.response(scope["path"], headers={"www-authenticate": "Bearer"})(scope, receive, send)


def _presented(scope: Scope, expected: list[tuple[bytes, str | None]]) -> tuple[bytes, str | None] | None:
    """The entry of `expected` (`Bearer <key>`, tenant) whose key the first `authorization` header
    (`Bearer <key>`) or the first `x-api-key` header (`<key>`) presents (the `authorization` header's when
    both present one), or None."""
    presented: dict[bytes, bytes] = {}
    for name, value in scope.get("headers", ()):
        if name in (b"authorization", b"x-api-key") and name not in presented:
            presented[name] = value.strip() if name == b"authorization" else b"Bearer " + value.strip()
    # every header against every key, whatever matched first: the time taken tells nothing of which one did
    found = None
    for name in (b"x-api-key", b"authorization"):  # the later match wins: `authorization`'s
        if name in presented:
            for entry in expected:
                if hmac.compare_digest(presented[name], entry[0]):
                    found = entry
    return found
